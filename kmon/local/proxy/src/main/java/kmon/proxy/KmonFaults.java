package kmon.proxy;

import io.kroxylicious.proxy.filter.Filter;
import io.kroxylicious.proxy.filter.FilterFactory;
import io.kroxylicious.proxy.filter.FilterFactoryContext;
import io.kroxylicious.proxy.plugin.Plugin;

/** The Kroxylicious plugin: one {@link FaultFilter} per client connection, no settings. */
@Plugin(configType = Void.class)
public class KmonFaults implements FilterFactory<Void, Void> {
    @Override
    public Void initialize(FilterFactoryContext context, Void config) {
        return null;
    }

    @Override
    public Filter createFilter(FilterFactoryContext context, Void config) {
        return new FaultFilter();
    }
}
