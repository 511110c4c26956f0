package kmon.proxy;

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;

import io.kroxylicious.proxy.KafkaProxy;
import io.kroxylicious.proxy.config.ConfigParser;
import io.kroxylicious.proxy.config.Configuration;
import io.kroxylicious.proxy.internal.config.Features;

/**
 * Starts Kroxylicious on a YAML configuration and kmon's fault control endpoint.
 *
 * <p>Usage: {@code java -cp 'lib/*' kmon.proxy.Main CONFIG.yaml CONTROL_PORT}. The control
 * endpoint binds 127.0.0.1 only. Kroxylicious' own command-line app is not used: only its
 * runtime is served whole from Maven Central at the pinned version.
 */
public final class Main {
    private Main() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: kmon.proxy.Main CONFIG.yaml CONTROL_PORT");
            System.exit(2);
        }
        Control.start(Integer.parseInt(args[1]));
        ConfigParser parser = new ConfigParser();
        Configuration config;
        try (InputStream in = Files.newInputStream(Path.of(args[0]))) {
            config = parser.parseConfiguration(in);
        }
        try (KafkaProxy proxy = new KafkaProxy(new LoopbackOnly(parser), config,
                Features.defaultFeatures())) {
            proxy.startup();
            System.out.println("kmon-kafka-proxy: started");
            proxy.block();
        }
    }
}
