package kmon.proxy;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * Per partition: the batches hidden from every fetch answer, the highest offset any answer has
 * carried (a batch is hidden only when first seen, so no reader ever got it), and the offset of
 * the last transaction marker seen (where a torn write's fake acknowledgement points: an offset
 * readers pass that holds no value) and the last marker a torn write was acknowledged at (one
 * torn write per marker: two acknowledged at one offset are two values there, which is
 * inconsistent-offsets, not a torn transaction; CI, 2026-11-28).
 */
final class Filtering {
    record Range(long first, long last) {
    }

    private static final Map<String, List<Range>> HIDDEN = new ConcurrentHashMap<>();
    private static final Map<String, Long> SEEN = new ConcurrentHashMap<>();
    private static final Map<String, Long> MARKER = new ConcurrentHashMap<>();
    private static final Map<String, Long> CLAIMED = new ConcurrentHashMap<>();

    private Filtering() {
    }

    static String tp(String topic, int partition) {
        return topic + "-" + partition;
    }

    static long seen(String tp) {
        return SEEN.getOrDefault(tp, -1L);
    }

    static void saw(String tp, long lastOffset) {
        SEEN.merge(tp, lastOffset, Math::max);
    }

    static void marker(String tp, long offset) {
        MARKER.merge(tp, offset, Math::max);
    }

    static Long lastMarker(String tp) {
        return MARKER.get(tp);
    }

    /** Whether no torn write has been acknowledged at ``marker`` (or a later one) yet. */
    static boolean unclaimed(String tp, long marker) {
        return CLAIMED.getOrDefault(tp, -1L) < marker;
    }

    /** Claims ``marker`` for one torn write; false if another write claimed it first. */
    static boolean claim(String tp, long marker) {
        boolean[] won = {false};
        CLAIMED.compute(tp, (k, before) -> {
            won[0] = before == null || before < marker;
            return won[0] ? marker : before;
        });
        return won[0];
    }

    static void hide(String tp, long first, long last) {
        HIDDEN.computeIfAbsent(tp, k -> new CopyOnWriteArrayList<>()).add(new Range(first, last));
    }

    static boolean hidden(String tp, long first) {
        List<Range> ranges = HIDDEN.get(tp);
        return ranges != null && ranges.stream().anyMatch(r -> r.first() == first);
    }

    static boolean anyHidden(String tp) {
        return HIDDEN.containsKey(tp);
    }

    static void clear() {
        HIDDEN.clear();
        SEEN.clear();
    }
}
