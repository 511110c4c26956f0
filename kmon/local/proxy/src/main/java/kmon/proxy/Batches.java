package kmon.proxy;

import java.nio.ByteBuffer;

import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.utils.Crc32C;

/**
 * Byte-level edits of record batches (magic 2) in a copy of their buffer: the records stay
 * as the client wrote them, only header fields change, and the CRC is computed anew.
 */
final class Batches {
    private static final int LENGTH = 8;
    private static final int CRC = 17;
    private static final int ATTRIBUTES = 21;
    private static final int PRODUCER_ID = 43;
    private static final int PRODUCER_EPOCH = 51;
    private static final int BASE_SEQUENCE = 53;
    private static final int RECORD_COUNT = 57;
    private static final int HEADER = 61;

    private Batches() {
    }

    interface Edit {
        void apply(ByteBuffer buf, int at);
    }

    /** A copy of ``records`` with ``edit`` applied to every batch header. */
    static MemoryRecords edited(MemoryRecords records, Edit edit) {
        ByteBuffer src = records.buffer();
        ByteBuffer buf = ByteBuffer.allocate(src.remaining());
        buf.put(src.duplicate()).flip();
        int at = 0;
        while (at + HEADER <= buf.limit()) {
            int size = 12 + buf.getInt(at + LENGTH);
            if (at + size > buf.limit()) {
                break;
            }
            edit.apply(buf, at);
            long crc = Crc32C.compute(buf, at + ATTRIBUTES, size - ATTRIBUTES);
            buf.putInt(at + CRC, (int) crc);
            at += size;
        }
        return MemoryRecords.readableRecords(buf);
    }

    /** Sequences moved back by ``delta``: the broker never saw that many records before. */
    static MemoryRecords shiftSequences(MemoryRecords records, int delta) {
        return edited(records, (buf, at) -> {
            int seq = buf.getInt(at + BASE_SEQUENCE);
            if (seq >= 0) {
                buf.putInt(at + BASE_SEQUENCE, seq - delta);
            }
        });
    }

    /** No producer id, epoch or sequence: the broker cannot tell a copy from the original. */
    static MemoryRecords stripIdempotence(MemoryRecords records) {
        return edited(records, (buf, at) -> {
            buf.putLong(at + PRODUCER_ID, -1L);
            buf.putShort(at + PRODUCER_EPOCH, (short) -1);
            buf.putInt(at + BASE_SEQUENCE, -1);
        });
    }

    static long producerId(MemoryRecords records) {
        ByteBuffer b = records.buffer();
        return b.remaining() >= HEADER ? b.getLong(b.position() + PRODUCER_ID) : -1L;
    }

    static short producerEpoch(MemoryRecords records) {
        ByteBuffer b = records.buffer();
        return b.remaining() >= HEADER ? b.getShort(b.position() + PRODUCER_EPOCH) : -1;
    }

    /** Records in every whole batch of ``records``. */
    static int recordCount(MemoryRecords records) {
        ByteBuffer b = records.buffer();
        int at = b.position();
        int n = 0;
        while (at + HEADER <= b.limit()) {
            n += b.getInt(at + RECORD_COUNT);
            at += 12 + b.getInt(at + LENGTH);
        }
        return n;
    }
}
