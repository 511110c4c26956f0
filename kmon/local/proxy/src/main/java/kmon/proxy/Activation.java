package kmon.proxy;

import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One fault switched on: which records it may touch and for how long.
 *
 * @param name     the fault (see {@link Faults#NAMES})
 * @param prefix   only topics whose name starts with this are touched ("" for all)
 * @param rate     the chance that one eligible produce, batch or fetch is touched
 * @param max      at most this many injections (0: no limit)
 * @param untilMs  new injections stop then (wall clock): every fault is bounded in time
 * @param holdMs   what was done stays done until then (hidden batches stay hidden)
 * @param injected how many injections so far
 */
record Activation(String name, String prefix, double rate, int max, long untilMs, long holdMs,
                  AtomicInteger injected) {

    boolean live(long now) {
        return now < untilMs && (max == 0 || injected.get() < max);
    }

    boolean held(long now) {
        return now < holdMs;
    }

    boolean matches(String topic) {
        return topic != null && topic.startsWith(prefix);
    }

    /** Claims one injection if the fault is live and the dice say so. */
    boolean draw(String topic) {
        if (!matches(topic) || !live(System.currentTimeMillis())) {
            return false;
        }
        if (ThreadLocalRandom.current().nextDouble() >= rate) {
            return false;
        }
        int n = injected.incrementAndGet();
        return max == 0 || n <= max;
    }
}
