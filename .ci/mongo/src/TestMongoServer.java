import java.util.List;

import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.h2.H2Backend;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;

/**
 * Starts mongo-java-server for tlsearch's tests: TestMongoServer HOST PORT [H2_FILE].
 * Reports MongoDB 6.0 (wire version 17) so current pymongo accepts it; prints "listening HOST:PORT"
 * once bound, and shuts down cleanly (flushing the H2 file) on SIGTERM or when its standard input closes,
 * so a server never outlives the test process that started it.
 */
public final class TestMongoServer {
    private static final MongoVersion MONGO_6_0 = new MongoVersion() {
        @Override public List<Integer> getVersionArray() { return List.of(6, 0, 0); }
        @Override public String toVersionString() { return "6.0.0"; }
        @Override public int getWireVersion() { return 17; }
    };

    public static void main(String[] args) {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        MongoBackend backend = args.length > 2 ? new H2Backend(args[2]) : new MemoryBackend();
        MongoServer server = new MongoServer(backend.version(MONGO_6_0));
        server.bind(host, port);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.shutdownNow();
            backend.close();
        }));
        System.out.println("listening " + server.getLocalAddress().getHostString() + ":" + server.getLocalAddress().getPort());
        System.out.flush();
        try {
            while (System.in.read() != -1) {
                // keep reading until the parent closes the pipe or dies
            }
        } catch (java.io.IOException ignored) {
            // the parent is gone
        }
        System.exit(0);
    }
}
