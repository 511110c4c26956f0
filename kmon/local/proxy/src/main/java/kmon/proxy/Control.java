package kmon.proxy;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.StringJoiner;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

/**
 * The fault switch: a small HTTP endpoint on 127.0.0.1 (never another address).
 *
 * <pre>
 * GET    /health                 "ok"
 * GET    /faults                 every activation and the injection log, as JSON
 * POST   /faults/NAME?prefix=P&amp;rate=R&amp;max=M&amp;seconds=S&amp;hold=H   switch NAME on for S seconds
 * DELETE /faults/NAME            switch NAME off (held effects stay until their hold ends)
 * POST   /reset                  everything off and forgotten
 * </pre>
 */
final class Control {
    private Control() {
    }

    static void start(int port) throws IOException {
        HttpServer server = HttpServer.create(
                new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 16);
        server.createContext("/", Control::handle);
        server.start();
    }

    private static void handle(HttpExchange ex) throws IOException {
        try {
            String path = ex.getRequestURI().getPath();
            String method = ex.getRequestMethod();
            if (path.equals("/health")) {
                reply(ex, 200, "ok");
            }
            else if (path.equals("/faults") && method.equals("GET")) {
                reply(ex, 200, state());
            }
            else if (path.equals("/reset") && method.equals("POST")) {
                Faults.reset();
                reply(ex, 200, "{}");
            }
            else if (path.startsWith("/faults/")) {
                fault(ex, path.substring("/faults/".length()), method);
            }
            else {
                reply(ex, 404, "no such endpoint");
            }
        }
        catch (RuntimeException e) {
            reply(ex, 400, String.valueOf(e.getMessage()));
        }
    }

    private static void fault(HttpExchange ex, String name, String method) throws IOException {
        if (!Faults.NAMES.contains(name)) {
            reply(ex, 404, "unknown fault " + name + ": one of " + Faults.NAMES);
            return;
        }
        if (method.equals("DELETE")) {
            Faults.deactivate(name);
            reply(ex, 200, "{}");
            return;
        }
        Map<String, String> q = query(ex.getRequestURI().getRawQuery());
        double seconds = Double.parseDouble(q.getOrDefault("seconds", "30"));
        Faults.activate(name, q.getOrDefault("prefix", ""),
                Double.parseDouble(q.getOrDefault("rate", "1")),
                Integer.parseInt(q.getOrDefault("max", "0")), seconds,
                Double.parseDouble(q.getOrDefault("hold", String.valueOf(seconds))));
        reply(ex, 200, "{}");
    }

    private static Map<String, String> query(String raw) {
        Map<String, String> out = new HashMap<>();
        if (raw == null) {
            return out;
        }
        for (String pair : raw.split("&")) {
            int eq = pair.indexOf('=');
            if (eq > 0) {
                out.put(pair.substring(0, eq),
                        URLDecoder.decode(pair.substring(eq + 1), StandardCharsets.UTF_8));
            }
        }
        return out;
    }

    private static String state() {
        long now = System.currentTimeMillis();
        StringJoiner active = new StringJoiner(",", "[", "]");
        for (Activation a : Faults.active().values()) {
            active.add("{\"name\":" + str(a.name()) + ",\"prefix\":" + str(a.prefix())
                    + ",\"rate\":" + a.rate() + ",\"max\":" + a.max() + ",\"injected\":"
                    + a.injected().get() + ",\"live\":" + a.live(now) + ",\"held\":"
                    + a.held(now) + "}");
        }
        StringJoiner log = new StringJoiner(",", "[", "]");
        Faults.log().forEach(line -> log.add(str(line)));
        return "{\"active\":" + active + ",\"log\":" + log + "}";
    }

    private static String str(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            }
            else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            }
            else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    private static void reply(HttpExchange ex, int code, String body) throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        ex.sendResponseHeaders(code, bytes.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(bytes);
        }
    }
}
