package kmon.proxy;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Records an idempotent producer sent that the broker never received under its producer id
 * (dropped, or sent with idempotence stripped), per producer, epoch and partition. Later
 * batches' sequences are moved back by that many, or the broker would refuse them as out of
 * order and the fault would be an error on the client instead of a silent anomaly.
 */
final class Sequences {
    private static final Map<String, Integer> MISSING = new ConcurrentHashMap<>();

    private Sequences() {
    }

    static String key(long producerId, short epoch, String topic, int partition) {
        return producerId + "/" + epoch + "/" + topic + "/" + partition;
    }

    static int missing(String key) {
        return MISSING.getOrDefault(key, 0);
    }

    static void add(String key, int records) {
        MISSING.merge(key, records, Integer::sum);
    }

    static boolean any() {
        return !MISSING.isEmpty();
    }

    static void clear() {
        MISSING.clear();
    }
}
