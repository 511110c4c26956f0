package kmon.proxy;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.EndTxnRequestData;
import org.apache.kafka.common.message.FetchRequestData;
import org.apache.kafka.common.message.FetchResponseData;
import org.apache.kafka.common.message.MetadataResponseData;
import org.apache.kafka.common.message.OffsetCommitRequestData;
import org.apache.kafka.common.message.OffsetCommitResponseData;
import org.apache.kafka.common.message.OffsetCommitResponseData.OffsetCommitResponsePartition;
import org.apache.kafka.common.message.OffsetCommitResponseData.OffsetCommitResponseTopic;
import org.apache.kafka.common.message.ProduceRequestData;
import org.apache.kafka.common.message.ProduceRequestData.PartitionProduceData;
import org.apache.kafka.common.message.ProduceRequestData.TopicProduceData;
import org.apache.kafka.common.message.ProduceResponseData;
import org.apache.kafka.common.message.ProduceResponseData.PartitionProduceResponse;
import org.apache.kafka.common.message.ProduceResponseData.TopicProduceResponse;
import org.apache.kafka.common.message.RequestHeaderData;
import org.apache.kafka.common.message.ResponseHeaderData;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MutableRecordBatch;

import io.kroxylicious.proxy.filter.EndTxnRequestFilter;
import io.kroxylicious.proxy.filter.FetchRequestFilter;
import io.kroxylicious.proxy.filter.FetchResponseFilter;
import io.kroxylicious.proxy.filter.FilterContext;
import io.kroxylicious.proxy.filter.MetadataResponseFilter;
import io.kroxylicious.proxy.filter.OffsetCommitRequestFilter;
import io.kroxylicious.proxy.filter.ProduceRequestFilter;
import io.kroxylicious.proxy.filter.ProduceResponseFilter;
import io.kroxylicious.proxy.filter.RequestFilterResult;
import io.kroxylicious.proxy.filter.ResponseFilterResult;

/**
 * kmon's faults on one client connection. Each does what a real Kafka-compatible broker was
 * seen to do (docs/detection-matrix.md links the findings); all are off unless switched on
 * through {@link Control}, and then touch only topics under the activation's prefix.
 */
final class FaultFilter implements MetadataResponseFilter, ProduceRequestFilter,
        ProduceResponseFilter, FetchRequestFilter, FetchResponseFilter, OffsetCommitRequestFilter,
        EndTxnRequestFilter {

    /** Fetch v13+ names topics by id: learnt from the metadata answers clients get. */
    private static final Map<Uuid, String> TOPIC_NAMES = new ConcurrentHashMap<>();

    /** Torn writes per produce request (by correlation id): acknowledged, never forwarded. */
    private record Torn(String topic, int partition, long offset) {
    }

    private final Map<Integer, List<Torn>> torn = new ConcurrentHashMap<>();

    /**
     * Ends the log line of an injection handed back, which is its injection's line and a
     * reason: kmon.nemesis.protocol leaves both lines out.
     */
    static final String NOT_COUNTED = " (not counted)";

    /**
     * Per transactional id, its open transaction's writes so far: {@code false} once one was
     * forwarded, {@code true} once one was torn; gone at its EndTxn. A producer's writes to
     * partitions led by different brokers travel in different requests, over connections each
     * with a filter of its own, hence one map for all.
     */
    private static final Map<String, Boolean> OPEN_TXNS = new ConcurrentHashMap<>();

    /** Per transactional id, the torn writes of its open transaction, settled at its EndTxn. */
    private static final Map<String, List<Torn>> OPEN_TEARS = new ConcurrentHashMap<>();

    // --- metadata ------------------------------------------------------------------------

    @Override
    public CompletionStage<ResponseFilterResult> onMetadataResponse(short version,
            ResponseHeaderData header, MetadataResponseData response, FilterContext ctx) {
        for (var t : response.topics()) {
            if (t.name() != null && t.topicId() != null && !Uuid.ZERO_UUID.equals(t.topicId())) {
                TOPIC_NAMES.put(t.topicId(), t.name());
            }
        }
        return ctx.forwardResponse(header, response);
    }

    private static String name(String name, Uuid id) {
        return name != null && !name.isEmpty() ? name : TOPIC_NAMES.get(id);
    }

    // --- produce -------------------------------------------------------------------------

    @Override
    public CompletionStage<RequestFilterResult> onProduceRequest(short version,
            RequestHeaderData header, ProduceRequestData request, FilterContext ctx) {
        if (Sequences.any()) {
            shiftSequences(request);
        }
        if (request.acks() == 0) {
            return ctx.forwardRequest(header, request);
        }
        if (request.transactionalId() != null) {
            List<Torn> dropped = tear(request);
            if (!dropped.isEmpty()) {
                if (request.topicData().isEmpty()) {  // nothing left to forward: answer here
                    return ctx.requestFilterResultBuilder()
                            .shortCircuitResponse(acks(new ProduceResponseData(), dropped))
                            .completed();
                }
                torn.put(header.correlationId(), dropped);
            }
        }
        else if (duplicate(request)) {
            ctx.sendRequest(new RequestHeaderData().setRequestApiVersion(version),
                    request.duplicate());
        }
        return ctx.forwardRequest(header, request);
    }

    private static void shiftSequences(ProduceRequestData request) {
        for (TopicProduceData t : request.topicData()) {
            for (PartitionProduceData p : t.partitionData()) {
                MemoryRecords r = (MemoryRecords) p.records();
                String key = Sequences.key(Batches.producerId(r), Batches.producerEpoch(r),
                        t.name(), p.index());
                int missing = Sequences.missing(key);
                if (missing > 0) {
                    p.setRecords(Batches.shiftSequences(r, missing));
                }
            }
        }
    }

    /**
     * One partition's write in a transaction dropped, if the torn-transaction fault says so:
     * at most one per transaction, and only when another write of it is forwarded (earlier, or
     * in this request), so that the transaction is torn (KAFKA-17754), not wholly lost. A tear
     * of every write, in requests to different brokers, left nothing of the transaction to read
     * (CI, 2026-11-27: four lost writes and no torn transaction). A partition's marker is
     * claimed by one torn write only: until readers pass a newer one, its writes go through.
     */
    private static List<Torn> tear(ProduceRequestData request) {
        Activation a = Faults.get(Faults.TORN_TRANSACTION);
        List<Torn> out = new ArrayList<>();
        if (a == null) {
            return out;
        }
        String txn = request.transactionalId();
        Boolean before = OPEN_TXNS.get(txn);  // null: nothing of this transaction forwarded yet
        int writes = request.topicData().stream().mapToInt(t -> t.partitionData().size()).sum();
        boolean mayTear = Boolean.FALSE.equals(before) || (before == null && writes > 1);
        for (Iterator<TopicProduceData> ti = request.topicData().iterator(); ti.hasNext();) {
            TopicProduceData t = ti.next();
            for (Iterator<PartitionProduceData> pi = t.partitionData().iterator(); pi.hasNext();) {
                PartitionProduceData p = pi.next();
                String tp = Filtering.tp(t.name(), p.index());
                Long marker = Filtering.lastMarker(tp);
                if (mayTear && out.isEmpty() && marker != null && Filtering.unclaimed(tp, marker)
                        && a.draw(t.name()) && Filtering.claim(tp, marker)) {
                    MemoryRecords r = (MemoryRecords) p.records();
                    Sequences.add(Sequences.key(Batches.producerId(r), Batches.producerEpoch(r),
                            t.name(), p.index()), Batches.recordCount(r));
                    out.add(new Torn(t.name(), p.index(), marker));
                    Faults.note(tornLine(txn, out.get(0)));
                    pi.remove();
                }
            }
            if (t.partitionData().isEmpty()) {
                ti.remove();
            }
        }
        if (!out.isEmpty()) {
            OPEN_TXNS.put(txn, true);
            OPEN_TEARS.computeIfAbsent(txn, k -> new CopyOnWriteArrayList<>()).addAll(out);
        }
        else if (before == null && a.matches(request.topicData().iterator().next().name())) {
            OPEN_TXNS.put(txn, false);
        }
        return out;
    }

    @Override
    public CompletionStage<RequestFilterResult> onEndTxnRequest(short version,
            RequestHeaderData header, EndTxnRequestData request, FilterContext ctx) {
        OPEN_TXNS.remove(request.transactionalId());  // the next transaction starts afresh
        List<Torn> tears = OPEN_TEARS.remove(request.transactionalId());
        if (tears != null && !request.committed()) {
            giveBack(request.transactionalId(), tears);
        }
        return ctx.forwardRequest(header, request);
    }

    /**
     * An aborted transaction's writes are never to be read, so dropping one of them is no
     * fault at all: its injections are handed back for a transaction that commits (CI,
     * 2026-12-07: all four tears fell in the probe's deliberate aborts, and nothing was torn).
     */
    private static void giveBack(String txn, List<Torn> tears) {
        Activation a = Faults.get(Faults.TORN_TRANSACTION);
        for (Torn t : tears) {
            // Only to the activation that made it: a transaction left open by an earlier one
            // (another prefix, since reset) may abort during the next.
            if (a != null && a.matches(t.topic())) {
                a.injected().decrementAndGet();
            }
            Faults.note(tornLine(txn, t) + "; its transaction aborted" + NOT_COUNTED);
        }
    }

    /** The log line of a torn write; a handed-back one repeats it, so both can be paired. */
    private static String tornLine(String txn, Torn t) {
        return "torn-transaction: " + txn + " write to " + t.topic() + "/" + t.partition()
                + " acknowledged at " + t.offset() + ", never forwarded";
    }

    /** Idempotence stripped from a plain produce, which is then also sent a second time. */
    private static boolean duplicate(ProduceRequestData request) {
        Activation a = Faults.get(Faults.DUPLICATE);
        if (a == null || request.topicData().stream().noneMatch(t -> a.matches(t.name()))
                || !a.draw(request.topicData().iterator().next().name())) {
            return false;
        }
        for (TopicProduceData t : request.topicData()) {
            for (PartitionProduceData p : t.partitionData()) {
                MemoryRecords r = (MemoryRecords) p.records();
                if (Batches.producerId(r) >= 0) {
                    Sequences.add(Sequences.key(Batches.producerId(r), Batches.producerEpoch(r),
                            t.name(), p.index()), Batches.recordCount(r));
                }
                p.setRecords(Batches.stripIdempotence(r));
                Faults.note("duplicate: produce to " + t.name() + "/" + p.index()
                        + " sent twice without idempotence");
            }
        }
        return true;
    }

    @Override
    public CompletionStage<ResponseFilterResult> onProduceResponse(short version,
            ResponseHeaderData header, ProduceResponseData response, FilterContext ctx) {
        List<Torn> dropped = torn.remove(header.correlationId());
        if (dropped != null) {
            acks(response, dropped);
        }
        Activation a = Faults.get(Faults.SPURIOUS_OFFSET);
        if (a != null) {
            spuriousOffsets(response, a);
        }
        return ctx.forwardResponse(header, response);
    }

    /** ``response`` with a success at each torn write's fake offset. */
    private static ProduceResponseData acks(ProduceResponseData response, List<Torn> dropped) {
        for (Torn d : dropped) {
            TopicProduceResponse t = response.responses().find(d.topic());
            if (t == null) {
                t = new TopicProduceResponse().setName(d.topic());
                response.responses().add(t);
            }
            t.partitionResponses().add(new PartitionProduceResponse().setIndex(d.partition())
                    .setErrorCode((short) 0).setBaseOffset(d.offset()).setLogAppendTimeMs(-1)
                    .setLogStartOffset(-1));
        }
        return response;
    }

    /** Bufstream #3: an acknowledgement says offset 0 though the records are elsewhere. */
    private static void spuriousOffsets(ProduceResponseData response, Activation a) {
        for (TopicProduceResponse t : response.responses()) {
            for (PartitionProduceResponse p : t.partitionResponses()) {
                if (p.errorCode() == 0 && p.baseOffset() > 10 && a.draw(t.name())) {
                    Faults.note("spurious-offset: " + t.name() + "/" + p.index() + " acked at 0,"
                            + " stored at " + p.baseOffset());
                    p.setBaseOffset(0);
                }
            }
        }
    }

    // --- fetch ---------------------------------------------------------------------------

    /** Read-committed fetches sent as read-uncommitted: aborted records reach the reader. */
    @Override
    public CompletionStage<RequestFilterResult> onFetchRequest(short version,
            RequestHeaderData header, FetchRequestData request, FilterContext ctx) {
        Activation a = Faults.get(Faults.ABORTED_READ);
        if (a != null && request.isolationLevel() == 1
                && request.topics().stream().anyMatch(t -> a.matches(name(t.topic(), t.topicId())))
                && a.draw(a.prefix())) {
            request.setIsolationLevel((byte) 0);
        }
        return ctx.forwardRequest(header, request);
    }

    @Override
    public CompletionStage<ResponseFilterResult> onFetchResponse(short version,
            ResponseHeaderData header, FetchResponseData response, FilterContext ctx) {
        Activation a = Faults.get(Faults.FILTERED_FETCH);
        for (var t : response.responses()) {
            String topic = name(t.topic(), t.topicId());
            if (topic == null) {
                continue;
            }
            for (var p : t.partitions()) {
                if (p.records() instanceof MemoryRecords r && r.sizeInBytes() > 0) {
                    p.setRecords(filter(Filtering.tp(topic, p.partitionIndex()), topic, r, a));
                }
            }
        }
        return ctx.forwardResponse(header, response);
    }

    /** Bufstream #5: batches chosen when first fetched are left out of every answer. */
    private static MemoryRecords filter(String tp, String topic, MemoryRecords r, Activation a) {
        long seen = Filtering.seen(tp);
        List<MutableRecordBatch> kept = new ArrayList<>();
        boolean dropped = false;
        for (MutableRecordBatch b : r.batches()) {
            if (b.isControlBatch()) {
                Filtering.marker(tp, b.baseOffset());
            }
            else if (a != null && b.baseOffset() > seen && !b.isTransactional()
                    && a.draw(topic)) {
                Filtering.hide(tp, b.baseOffset(), b.lastOffset());
                Faults.note("server-side-filtering: " + tp + " offsets " + b.baseOffset() + ".."
                        + b.lastOffset() + " left out of every fetch answer");
            }
            Filtering.saw(tp, b.lastOffset());
            if (a != null && Filtering.anyHidden(tp) && Filtering.hidden(tp, b.baseOffset())) {
                dropped = true;
            }
            else {
                kept.add(b);
            }
        }
        if (!dropped) {
            return r;
        }
        ByteBuffer buf = ByteBuffer.allocate(r.sizeInBytes());
        kept.forEach(b -> b.writeTo(buf));
        buf.flip();
        return MemoryRecords.readableRecords(buf);
    }

    // --- offset commits --------------------------------------------------------------------

    /**
     * A consumer group's offset commit acknowledged and never forwarded: the coordinator keeps
     * the group's previous offsets, and the next consumer assigned the partitions starts there
     * (it re-reads). Only requests whose every topic is under the prefix are touched.
     */
    @Override
    public CompletionStage<RequestFilterResult> onOffsetCommitRequest(short version,
            RequestHeaderData header, OffsetCommitRequestData request, FilterContext ctx) {
        Activation a = Faults.get(Faults.LOST_OFFSET_COMMIT);
        if (a == null || request.topics().isEmpty()
                || !request.topics().stream().allMatch(t -> a.matches(t.name()))
                || !a.draw(request.topics().get(0).name())) {
            return ctx.forwardRequest(header, request);
        }
        OffsetCommitResponseData response = new OffsetCommitResponseData();
        for (var t : request.topics()) {
            OffsetCommitResponseTopic rt = new OffsetCommitResponseTopic().setName(t.name());
            for (var p : t.partitions()) {
                rt.partitions().add(new OffsetCommitResponsePartition()
                        .setPartitionIndex(p.partitionIndex()).setErrorCode((short) 0));
                Faults.note("lost-offset-commit: group " + request.groupId() + " " + t.name()
                        + "/" + p.partitionIndex() + " at " + p.committedOffset()
                        + " acknowledged, never forwarded");
            }
            response.topics().add(rt);
        }
        return ctx.requestFilterResultBuilder().shortCircuitResponse(response).completed();
    }
}
