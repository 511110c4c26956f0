import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.common.TopicPartition;

/**
 * Moves one partition to the given replicas (the first is the preferred leader) and waits for
 * the move to finish: confluent-kafka has no AlterPartitionReassignments. Run from its source
 * with the cached Kafka's classpath: java -cp 'lib/*' Reassign.java BOOTSTRAP TOPIC PARTITION 1,2
 */
public final class Reassign {
    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: Reassign BOOTSTRAP TOPIC PARTITION REPLICA,REPLICA...");
            System.exit(2);
        }
        List<Integer> replicas = new ArrayList<>();
        for (String r : args[3].split(",")) {
            replicas.add(Integer.parseInt(r.trim()));
        }
        TopicPartition tp = new TopicPartition(args[1], Integer.parseInt(args[2]));
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        try (Admin admin = Admin.create(props)) {
            admin.alterPartitionReassignments(
                    Map.of(tp, Optional.of(new NewPartitionReassignment(replicas)))).all().get();
            long deadline = System.currentTimeMillis() + 60_000;
            while (!admin.listPartitionReassignments(Set.of(tp)).reassignments().get().isEmpty()) {
                if (System.currentTimeMillis() > deadline) {
                    System.err.println("reassignment of " + tp + " still running after 60 s");
                    System.exit(1);
                }
                Thread.sleep(200);
            }
        }
        System.out.println("reassigned " + tp + " to " + replicas);
    }
}
