package kmon.proxy;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The faults switched on now, shared by every connection's filter, and a bounded log of what
 * they did (the control endpoint's evidence).
 */
final class Faults {
    static final String SPURIOUS_OFFSET = "spurious-offset";
    static final String FILTERED_FETCH = "server-side-filtering";
    static final String TORN_TRANSACTION = "torn-transaction";
    static final String ABORTED_READ = "aborted-read";
    static final String DUPLICATE = "duplicate";
    static final String LOST_OFFSET_COMMIT = "lost-offset-commit";
    static final Set<String> NAMES = Set.of(SPURIOUS_OFFSET, FILTERED_FETCH, TORN_TRANSACTION,
            ABORTED_READ, DUPLICATE, LOST_OFFSET_COMMIT);
    private static final int LOG_LINES = 200;

    private static final Map<String, Activation> ACTIVE = new ConcurrentHashMap<>();
    private static final Deque<String> LOG = new ArrayDeque<>();

    private Faults() {
    }

    static void activate(String name, String prefix, double rate, int max, double seconds,
                         double holdSeconds) {
        long now = System.currentTimeMillis();
        long until = now + (long) (seconds * 1000);
        long hold = Math.max(until, now + (long) (holdSeconds * 1000));
        ACTIVE.put(name, new Activation(name, prefix, rate, max, until, hold, new AtomicInteger()));
        note(name + " on: prefix=" + prefix + " rate=" + rate + " max=" + max + " seconds="
                + seconds + " hold=" + holdSeconds);
    }

    /** No new injections; what is held (hidden batches) stays until its hold ends. */
    static void deactivate(String name) {
        Activation a = ACTIVE.get(name);
        if (a != null) {
            long now = System.currentTimeMillis();
            ACTIVE.put(name, new Activation(a.name(), a.prefix(), a.rate(), a.max(),
                    Math.min(now, a.untilMs()), a.holdMs(), a.injected()));
            note(name + " off after " + a.injected().get() + " injections");
        }
    }

    static void reset() {
        ACTIVE.clear();
        Filtering.clear();
        Sequences.clear();
        note("reset");
    }

    /** The activation of ``name`` if it is live or still held, else null. */
    static Activation get(String name) {
        Activation a = ACTIVE.get(name);
        return a != null && a.held(System.currentTimeMillis()) ? a : null;
    }

    static void note(String line) {
        synchronized (LOG) {
            LOG.addLast(System.currentTimeMillis() + " " + line);
            while (LOG.size() > LOG_LINES) {
                LOG.removeFirst();
            }
        }
    }

    static List<String> log() {
        synchronized (LOG) {
            return new ArrayList<>(LOG);
        }
    }

    static Map<String, Activation> active() {
        return Map.copyOf(ACTIVE);
    }
}
