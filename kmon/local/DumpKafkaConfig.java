// Prints every broker setting Kafka knows, one "name<TAB>type" per line. `kmon setup` runs it
// once against the cached jars (java's single-file source launcher, no build step), so that
// overrides can be checked by name without starting a JVM.
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.config.ConfigDef;

public class DumpKafkaConfig {
    public static void main(String[] args) {
        Map<String, ConfigDef.ConfigKey> keys =
            new TreeMap<>(kafka.server.KafkaConfig.configDef().configKeys());
        for (ConfigDef.ConfigKey key : keys.values()) {
            System.out.println(key.name + "\t" + key.type);
        }
    }
}
