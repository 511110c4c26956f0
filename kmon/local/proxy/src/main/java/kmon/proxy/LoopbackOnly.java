package kmon.proxy;

import java.util.Map;
import java.util.Optional;
import java.util.Set;

import io.kroxylicious.proxy.config.PluginFactory;
import io.kroxylicious.proxy.config.PluginFactoryRegistry;
import io.kroxylicious.proxy.service.ClusterNetworkAddressConfigProvider;
import io.kroxylicious.proxy.service.ClusterNetworkAddressConfigProviderService;
import io.kroxylicious.proxy.service.HostPort;

/**
 * Kroxylicious' plugin registry with every gateway bound to 127.0.0.1: its port-per-node
 * gateway binds all interfaces and 0.12 has no setting for that, and kmon's proxy must never
 * listen beyond loopback.
 */
final class LoopbackOnly implements PluginFactoryRegistry {
    static final String LOOPBACK = "127.0.0.1";
    private final PluginFactoryRegistry inner;

    LoopbackOnly(PluginFactoryRegistry inner) {
        this.inner = inner;
    }

    @Override
    @SuppressWarnings("unchecked")
    public <P> PluginFactory<P> pluginFactory(Class<P> type) {
        PluginFactory<P> factory = inner.pluginFactory(type);
        if (type != ClusterNetworkAddressConfigProviderService.class) {
            return factory;
        }
        return new PluginFactory<>() {
            @Override
            public P pluginInstance(String name) {
                var service = (ClusterNetworkAddressConfigProviderService<Object>) factory
                        .pluginInstance(name);
                ClusterNetworkAddressConfigProviderService<Object> wrapped =
                        config -> new Provider(service.build(config));
                return (P) wrapped;
            }

            @Override
            public Class<?> configType(String name) {
                return factory.configType(name);
            }
        };
    }

    /** The library's provider, bound to loopback. */
    private record Provider(ClusterNetworkAddressConfigProvider p)
            implements ClusterNetworkAddressConfigProvider {
        @Override
        public HostPort getClusterBootstrapAddress() {
            return p.getClusterBootstrapAddress();
        }

        @Override
        public HostPort getBrokerAddress(int nodeId) {
            return p.getBrokerAddress(nodeId);
        }

        @Override
        public HostPort getAdvertisedBrokerAddress(int nodeId) {
            return p.getAdvertisedBrokerAddress(nodeId);
        }

        @Override
        public Integer getBrokerIdFromBrokerAddress(HostPort address) {
            return p.getBrokerIdFromBrokerAddress(address);
        }

        @Override
        public Optional<String> getBindAddress() {
            return Optional.of(LOOPBACK);
        }

        @Override
        public boolean requiresServerNameIndication() {
            return p.requiresServerNameIndication();
        }

        @Override
        public Set<Integer> getExclusivePorts() {
            return p.getExclusivePorts();
        }

        @Override
        public Set<Integer> getSharedPorts() {
            return p.getSharedPorts();
        }

        @Override
        public Map<Integer, HostPort> discoveryAddressMap() {
            return p.discoveryAddressMap();
        }
    }
}
