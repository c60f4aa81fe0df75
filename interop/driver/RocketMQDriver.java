/*
 * The test suite's hands on the real Apache RocketMQ Java client (brokergroup project code).
 *
 * One small program, compiled by interop/install.sh against each client version's jars, that
 * produces, consumes and runs mqadmin commands the way a RocketMQ application does, and prints
 * what happened as JSON lines (one object per event, a "summary" object last) for the Python
 * tests to assert on.  With --trace every remoting request the client sends or receives, and
 * every reply, is printed too (an RPCHook), so tests can see the request codes in order.
 *
 *   produce   --namesrv H:P --topic T [--count N] [--mode sync|async|oneway|batch] [--batch K]
 *             [--size BYTES] [--body hash|text] [--tags A[,B..]] [--keys-prefix P] [--prop k=v]..
 *             [--group G] [--id-prefix P] [--send-timeout-ms MS] [--retries N]
 *             [--compress-over BYTES] [--queue-id Q] [--delay-level L] [--quiet true]
 *             (--quiet true: no "send" event per request, only the summary with elapsedMs:
 *             the timed producer of bench/rocketmq.py)
 *   lite-pull --namesrv H:P --topic T [--tag-expr E] [--group G] [--expect N] [--timeout-s S]
 *             [--from first|last] [--batch-size N] [--quiet-ms MS]
 *   push      --namesrv H:P --topic T [--tag-expr E] [--group G] [--consumers C] [--expect N]
 *             [--fail-ids a,b] [--fail-times F] [--max-reconsume K] [--retry-delay-level L]
 *             [--timeout-s S] [--from first|last] [--linger-ms MS] [--ready-file PATH]
 *   admin     <mqadmin sub-command and its arguments>  (exit status 1 when the command threw)
 *   acl-sign  --access-key AK --secret-key SK [--field k=v].. [--body-hex H]: one request signed
 *             by AclClientRPCHook; prints its extFields
 *
 * produce, lite-pull, push: --access-key AK --secret-key SK [--security-token T] sign every
 * request with the real AclClientRPCHook (RocketMQ ACL 1.0).
 *
 * The body of message <id> is deterministic (see body()), so readers verify bytes by sha256.
 */

import java.io.PrintStream;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.commons.cli.CommandLine;
import org.apache.commons.cli.Options;
import org.apache.commons.cli.PosixParser;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.CommandCustomHeader;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.srvutil.ServerUtil;
import org.apache.rocketmq.tools.command.MQAdminStartup;
import org.apache.rocketmq.tools.command.SubCommand;

public final class RocketMQDriver {
    private static final PrintStream OUT = System.out;
    private static final AtomicInteger SEND_OK = new AtomicInteger();
    /** produce --quiet true: count sends, print no event per send (a timed benchmark run). */
    private static volatile boolean quiet;

    public static void main(String[] argv) throws Exception {
        if (argv.length == 0) {
            System.err.println("usage: RocketMQDriver produce|lite-pull|push|admin [options]");
            System.exit(2);
        }
        String command = argv[0];
        String[] rest = Arrays.copyOfRange(argv, 1, argv.length);
        int status;
        switch (command) {
            case "produce":
                status = produce(new Args(rest));
                break;
            case "lite-pull":
                status = litePull(new Args(rest));
                break;
            case "push":
                status = push(new Args(rest));
                break;
            case "admin":
                status = admin(rest);
                break;
            case "acl-sign":
                status = aclSign(new Args(rest));
                break;
            default:
                System.err.println("unknown command " + command);
                status = 2;
        }
        System.out.flush();
        System.exit(status);
    }

    // ---- produce ----------------------------------------------------------------------------

    static int produce(Args a) throws Exception {
        String topic = a.required("topic");
        int count = a.integer("count", 10);
        String mode = a.get("mode", "sync");
        quiet = a.get("quiet", "false").equals("true");
        int batch = a.integer("batch", 4);
        int size = a.integer("size", 64);
        String bodyKind = a.get("body", "hash");
        String[] tags = a.get("tags", "").isEmpty() ? new String[0] : a.get("tags", "").split(",");
        String keysPrefix = a.get("keys-prefix", null);
        String idPrefix = a.get("id-prefix", Long.toHexString(System.nanoTime()) + "-");
        int delayLevel = a.integer("delay-level", 0);
        Map<String, String> props = new LinkedHashMap<>();
        for (String kv : a.all("prop")) {
            int eq = kv.indexOf('=');
            props.put(kv.substring(0, eq), kv.substring(eq + 1));
        }

        DefaultMQProducer producer = new DefaultMQProducer(a.get("group", "driver_producer"), hook(a));
        producer.setNamesrvAddr(a.required("namesrv"));
        producer.setInstanceName(a.get("instance", "producer-" + ProcessHandle.current().pid()));
        producer.setSendMsgTimeout(a.integer("send-timeout-ms", 5000));
        producer.setRetryTimesWhenSendFailed(a.integer("retries", 2));
        producer.setRetryTimesWhenSendAsyncFailed(a.integer("retries", 2));
        producer.setCompressMsgBodyOverHowmuch(a.integer("compress-over", 4096));
        producer.start();

        MessageQueue fixedQueue = null;
        if (a.has("queue-id")) {
            int qid = a.integer("queue-id", 0);
            for (MessageQueue mq : producer.fetchPublishMessageQueues(topic)) {
                if (mq.getQueueId() == qid && (!a.has("broker-name") || mq.getBrokerName().equals(a.get("broker-name", "")))) {
                    fixedQueue = mq;
                    break;
                }
            }
            if (fixedQueue == null) {
                throw new IllegalArgumentException("no queue " + qid + " in the route of " + topic);
            }
        }

        List<Message> messages = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            String id = idPrefix + i;
            Message msg = new Message(topic, body(id, size, bodyKind));
            if (tags.length > 0) {
                msg.setTags(tags[i % tags.length]);
            }
            if (keysPrefix != null) {
                msg.setKeys(keysPrefix + i);
            }
            for (Map.Entry<String, String> e : props.entrySet()) {
                msg.putUserProperty(e.getKey(), e.getValue());
            }
            msg.putUserProperty("id", id);
            msg.putUserProperty("seq", Integer.toString(i));
            if (delayLevel > 0) {
                msg.setDelayTimeLevel(delayLevel);
            }
            messages.add(msg);
        }

        long started = System.nanoTime();
        AtomicInteger ok = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        switch (mode) {
            case "sync":
                for (Message msg : messages) {
                    List<Message> one = Arrays.asList(msg);
                    try {
                        SendResult r = fixedQueue == null ? producer.send(msg) : producer.send(msg, fixedQueue);
                        emitSend(one, r, null, ok, failed);
                    } catch (Exception e) {
                        emitSend(one, null, e, ok, failed);
                    }
                }
                break;
            case "async": {
                CountDownLatch done = new CountDownLatch(messages.size());
                for (Message msg : messages) {
                    final List<Message> one = Arrays.asList(msg);
                    SendCallback cb = new SendCallback() {
                        @Override
                        public void onSuccess(SendResult r) {
                            emitSend(one, r, null, ok, failed);
                            done.countDown();
                        }

                        @Override
                        public void onException(Throwable e) {
                            emitSend(one, null, e, ok, failed);
                            done.countDown();
                        }
                    };
                    try {
                        if (fixedQueue == null) {
                            producer.send(msg, cb);
                        } else {
                            producer.send(msg, fixedQueue, cb);
                        }
                    } catch (Exception e) {
                        cb.onException(e);
                    }
                }
                if (!done.await(a.integer("send-timeout-ms", 5000) * 4L + 10000, TimeUnit.MILLISECONDS)) {
                    emit(obj("event", "error", "error", "async callbacks missing: " + done.getCount()));
                    failed.addAndGet((int) done.getCount());
                }
                break;
            }
            case "oneway":
                for (Message msg : messages) {
                    List<Message> one = Arrays.asList(msg);
                    try {
                        if (fixedQueue == null) {
                            producer.sendOneway(msg);
                        } else {
                            producer.sendOneway(msg, fixedQueue);
                        }
                        ok.incrementAndGet();
                        emit(obj("event", "send", "ids", ids(one), "sha256", Arrays.asList(sha256(msg.getBody())),
                            "status", "ONEWAY"));
                    } catch (Exception e) {
                        emitSend(one, null, e, ok, failed);
                    }
                }
                break;
            case "batch":
                for (int i = 0; i < messages.size(); i += batch) {
                    List<Message> chunk = messages.subList(i, Math.min(messages.size(), i + batch));
                    try {
                        SendResult r = fixedQueue == null ? producer.send(chunk) : producer.send(chunk, fixedQueue);
                        emitSend(chunk, r, null, ok, failed);
                    } catch (Exception e) {
                        emitSend(chunk, null, e, ok, failed);
                    }
                }
                break;
            default:
                throw new IllegalArgumentException("--mode sync|async|oneway|batch, not " + mode);
        }
        long elapsedMs = (System.nanoTime() - started) / 1_000_000;
        producer.shutdown();
        emit(obj("event", "summary", "command", "produce", "mode", mode, "count", count, "ok", ok.get(), "sendOk", SEND_OK.get(),
            "failed", failed.get(), "elapsedMs", elapsedMs, "idPrefix", idPrefix));
        return failed.get() == 0 ? 0 : 1;
    }

    static void emitSend(List<Message> msgs, SendResult r, Throwable e, AtomicInteger ok, AtomicInteger failed) {
        if (quiet && r != null) {
            ok.addAndGet(msgs.size());
            if (r.getSendStatus().name().equals("SEND_OK")) {
                SEND_OK.addAndGet(msgs.size());
            }
            return;
        }
        Map<String, Object> o = obj("event", "send", "ids", ids(msgs));
        List<String> shas = new ArrayList<>();
        for (Message m : msgs) {
            shas.add(sha256(m.getBody()));
        }
        o.put("sha256", shas);
        if (r != null) {
            ok.addAndGet(msgs.size());
            if (r.getSendStatus().name().equals("SEND_OK")) {
                SEND_OK.addAndGet(msgs.size());
            }
            o.put("status", r.getSendStatus().name());
            o.put("msgId", r.getMsgId());
            o.put("offsetMsgId", r.getOffsetMsgId());
            o.put("queueId", r.getMessageQueue().getQueueId());
            o.put("queueOffset", r.getQueueOffset());
            o.put("brokerName", r.getMessageQueue().getBrokerName());
            o.put("topic", r.getMessageQueue().getTopic());
        } else {
            failed.addAndGet(msgs.size());
            o.put("status", "EXCEPTION");
            o.put("exception", e.getClass().getName());
            o.put("message", String.valueOf(e.getMessage()));
            // a broker's refusal (MQBrokerException, maybe the cause of the retry loop's
            // MQClientException): its response code and remark, for tests to compare exactly
            for (Throwable c = e; c != null; c = c.getCause()) {
                if (c instanceof MQBrokerException) {
                    o.put("responseCode", ((MQBrokerException) c).getResponseCode());
                    o.put("remark", ((MQBrokerException) c).getErrorMessage());
                    break;
                }
            }
        }
        emit(o);
    }

    static List<String> ids(List<Message> msgs) {
        List<String> out = new ArrayList<>();
        for (Message m : msgs) {
            out.add(m.getUserProperty("id"));
        }
        return out;
    }

    /** Body of message {@code id}: "hash" = sha256(id:0) || sha256(id:1) || ..., "text" = "id;" repeated. */
    static byte[] body(String id, int size, String kind) throws Exception {
        byte[] out = new byte[size];
        if (kind.equals("text")) {
            byte[] unit = (id + ";").getBytes(StandardCharsets.UTF_8);
            for (int i = 0; i < size; i++) {
                out[i] = unit[i % unit.length];
            }
            return out;
        }
        if (!kind.equals("hash")) {
            throw new IllegalArgumentException("--body hash|text, not " + kind);
        }
        for (int block = 0, at = 0; at < size; block++) {
            byte[] d = MessageDigest.getInstance("SHA-256").digest((id + ":" + block).getBytes(StandardCharsets.UTF_8));
            int n = Math.min(d.length, size - at);
            System.arraycopy(d, 0, out, at, n);
            at += n;
        }
        return out;
    }

    // ---- consumers ----------------------------------------------------------------------------

    static int litePull(Args a) throws Exception {
        String topic = a.required("topic");
        int expect = a.integer("expect", -1);
        long deadline = System.currentTimeMillis() + a.integer("timeout-s", 30) * 1000L;
        long quietMs = a.integer("quiet-ms", -1);
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(a.get("group", "driver_lite_pull"), hook(a));
        consumer.setNamesrvAddr(a.required("namesrv"));
        consumer.setInstanceName(a.get("instance", "lite-" + ProcessHandle.current().pid()));
        consumer.setConsumeFromWhere(fromWhere(a));
        consumer.setAutoCommit(true);
        consumer.setPullBatchSize(a.integer("batch-size", 32));
        consumer.subscribe(topic, a.get("tag-expr", "*"));
        consumer.start();
        int received = 0;
        Set<String> distinct = new HashSet<>();
        long lastMessage = System.currentTimeMillis();
        while (System.currentTimeMillis() < deadline && (expect < 0 || distinct.size() < expect)) {
            List<MessageExt> batch = consumer.poll(500);
            for (MessageExt m : batch) {
                received++;
                distinct.add(String.valueOf(m.getUserProperty("id")));
                emit(describe(m, "message"));
            }
            if (!batch.isEmpty()) {
                lastMessage = System.currentTimeMillis();
            } else if (quietMs >= 0 && received > 0 && System.currentTimeMillis() - lastMessage > quietMs) {
                break;
            }
        }
        consumer.commitSync();
        consumer.shutdown();
        boolean complete = expect < 0 || distinct.size() >= expect;
        emit(obj("event", "summary", "command", "lite-pull", "received", received, "distinct", distinct.size(),
            "expect", expect, "complete", complete));
        return complete ? 0 : 1;
    }

    static int push(Args a) throws Exception {
        final String topic = a.required("topic");
        final int expect = a.integer("expect", -1);
        final int consumers = a.integer("consumers", 1);
        final int maxReconsume = a.integer("max-reconsume", 16);
        final int failTimes = a.integer("fail-times", -1);
        final int retryDelayLevel = a.integer("retry-delay-level", 1);
        final Set<String> failIds = new HashSet<>();
        if (!a.get("fail-ids", "").isEmpty()) {
            failIds.addAll(Arrays.asList(a.get("fail-ids", "").split(",")));
        }
        final Set<String> succeeded = ConcurrentHashMap.newKeySet();
        final Map<String, AtomicInteger> deliveries = new ConcurrentHashMap<>();
        final Map<String, Integer> maxRetry = new ConcurrentHashMap<>();
        final AtomicInteger received = new AtomicInteger();
        final Object changed = new Object();
        String group = a.get("group", "driver_push");
        List<DefaultMQPushConsumer> started = new ArrayList<>();
        long deadline = System.currentTimeMillis() + a.integer("timeout-s", 60) * 1000L;
        for (int c = 0; c < consumers; c++) {
            final String instance = a.get("instance", "push") + "-" + c;
            DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, hook(a), new AllocateMessageQueueAveragely());
            consumer.setNamesrvAddr(a.required("namesrv"));
            consumer.setInstanceName(instance);
            // cluster mode is the default (its MessageModel class moved between 4.x and 5.x)
            consumer.setConsumeFromWhere(fromWhere(a));
            consumer.setMaxReconsumeTimes(maxReconsume);
            consumer.setConsumeThreadMin(2);
            consumer.setConsumeThreadMax(4);
            consumer.subscribe(topic, a.get("tag-expr", "*"));
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
                boolean fail = false;
                for (MessageExt m : msgs) {
                    String id = String.valueOf(m.getUserProperty("id"));
                    int n = deliveries.computeIfAbsent(id, k -> new AtomicInteger()).incrementAndGet();
                    maxRetry.merge(id, m.getReconsumeTimes(), Math::max);
                    boolean failThis = failIds.contains(id) && (failTimes < 0 || n <= failTimes);
                    Map<String, Object> o = describe(m, "delivery");
                    o.put("consumer", instance);
                    o.put("delivery", n);
                    o.put("result", failThis ? "RECONSUME_LATER" : "CONSUME_SUCCESS");
                    emit(o);
                    received.incrementAndGet();
                    fail |= failThis;
                }
                if (fail) {
                    context.setDelayLevelWhenNextConsume(retryDelayLevel);
                } else {
                    for (MessageExt m : msgs) {
                        succeeded.add(String.valueOf(m.getUserProperty("id")));
                    }
                }
                synchronized (changed) {
                    changed.notifyAll();
                }
                return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            started.add(consumer);
        }
        String readyFile = a.get("ready-file", null);
        if (readyFile != null) {
            // Tell the caller (who produces next) once every consumer holds queues of the topic.
            while (System.currentTimeMillis() < deadline && !allAssigned(started, topic)) {
                Thread.sleep(100);
            }
            emit(obj("event", "ready", "assigned", allAssigned(started, topic)));
            java.nio.file.Files.write(java.nio.file.Paths.get(readyFile), new byte[0]);
        }
        // Done when `expect` ids were consumed and each always-failing id was delivered with
        // reconsumeTimes = maxReconsume (its failure then sends it to %DLQ%group).
        while (System.currentTimeMillis() < deadline) {
            boolean done = expect < 0 ? false : succeeded.size() >= expect;
            if (done && failTimes < 0) {
                for (String id : failIds) {
                    Integer n = maxRetry.get(id);
                    done &= n != null && n >= maxReconsume;
                }
            }
            if (done) {
                break;
            }
            synchronized (changed) {
                changed.wait(200);
            }
        }
        Thread.sleep(a.integer("linger-ms", 1500));
        for (DefaultMQPushConsumer consumer : started) {
            Set<String> queues = new TreeSet<>();
            for (MessageQueue mq : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
                queues.add(mq.getTopic() + "@" + mq.getBrokerName() + ":" + mq.getQueueId());
            }
            emit(obj("event", "assignment", "consumer", consumer.getInstanceName(), "queues", new ArrayList<>(queues)));
        }
        for (DefaultMQPushConsumer consumer : started) {
            consumer.shutdown();
        }
        boolean complete = expect < 0 || succeeded.size() >= expect;
        emit(obj("event", "summary", "command", "push", "received", received.get(), "succeeded", succeeded.size(),
            "expect", expect, "complete", complete));
        return complete ? 0 : 1;
    }

    static boolean allAssigned(List<DefaultMQPushConsumer> consumers, String topic) {
        for (DefaultMQPushConsumer c : consumers) {
            boolean any = false;
            for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
                any |= mq.getTopic().equals(topic);
            }
            if (!any) {
                return false;
            }
        }
        return true;
    }

    static ConsumeFromWhere fromWhere(Args a) {
        String from = a.get("from", "first");
        if (from.equals("first")) {
            return ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET;
        }
        if (from.equals("last")) {
            return ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET;
        }
        throw new IllegalArgumentException("--from first|last, not " + from);
    }

    static Map<String, Object> describe(MessageExt m, String event) {
        Map<String, String> user = new TreeMap<>();
        for (Map.Entry<String, String> e : m.getProperties().entrySet()) {
            if (!MessageConst.STRING_HASH_SET.contains(e.getKey())) {
                user.put(e.getKey(), e.getValue());
            }
        }
        Map<String, Object> o = obj("event", event, "id", m.getUserProperty("id"), "msgId", m.getMsgId(),
            "topic", m.getTopic(), "tags", m.getTags(), "keys", m.getKeys(), "properties", user,
            "bodyLength", m.getBody() == null ? -1 : m.getBody().length, "sha256", sha256(m.getBody()),
            "queueId", m.getQueueId(), "queueOffset", m.getQueueOffset(), "commitLogOffset", m.getCommitLogOffset(),
            "reconsumeTimes", m.getReconsumeTimes(), "storeHost", hostPort(m.getStoreHost()),
            "bornHost", hostPort(m.getBornHost()), "brokerName", m.getBrokerName(), "sysFlag", m.getSysFlag());
        o.put("systemProperties", new TreeMap<>(m.getProperties()));
        return o;
    }

    static String hostPort(SocketAddress address) {
        if (address instanceof InetSocketAddress) {
            InetSocketAddress in = (InetSocketAddress) address;
            return in.getAddress().getHostAddress() + ":" + in.getPort();
        }
        return String.valueOf(address);
    }

    // ---- admin --------------------------------------------------------------------------------

    /** mqadmin itself, but with an exit status and (with --trace first) the request trace. */
    @SuppressWarnings({"unchecked", "deprecation"})
    static int admin(String[] args) throws Exception {
        boolean trace = args.length > 0 && args[0].equals("--trace");
        if (trace) {
            args = Arrays.copyOfRange(args, 1, args.length);
        }
        if (args.length == 0) {
            MQAdminStartup.main(args);
            return 2;
        }
        MQAdminStartup.initCommand();
        Field list;
        try {
            list = MQAdminStartup.class.getDeclaredField("subCommandList");  // 4.x
        } catch (NoSuchFieldException e) {
            list = MQAdminStartup.class.getDeclaredField("SUB_COMMANDS");  // 5.x
        }
        list.setAccessible(true);
        SubCommand cmd = null;
        for (SubCommand c : (List<SubCommand>) list.get(null)) {
            if (c.commandName().equals(args[0]) || args[0].equals(aliasOf(c))) {
                cmd = c;
            }
        }
        if (cmd == null) {
            System.err.println("no mqadmin sub-command " + args[0]);
            return 2;
        }
        Options options = ServerUtil.buildCommandlineOptions(new Options());
        CommandLine line = ServerUtil.parseCmdLine("mqadmin " + cmd.commandName(),
            Arrays.copyOfRange(args, 1, args.length), cmd.buildCommandlineOptions(options), new PosixParser());
        if (line == null) {
            return 2;
        }
        if (line.hasOption('n')) {
            System.setProperty("rocketmq.namesrv.addr", line.getOptionValue('n'));
        }
        try {
            cmd.execute(line, options, trace ? new TraceHook() : null);
            return 0;
        } catch (Exception e) {
            e.printStackTrace();
            return 1;
        }
    }

    static String aliasOf(SubCommand c) {
        try {
            return (String) c.getClass().getMethod("commandAlias").invoke(c);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    // ---- request trace ------------------------------------------------------------------------

    /** --access-key/--secret-key [--security-token]: the real client's AclClientRPCHook (ACL 1.0)
     *  signs every request; with --trace too, the trace sees the signed request. */
    static RPCHook hook(Args a) {
        RPCHook trace = a.flag("trace") ? new TraceHook() : null;
        if (!a.has("access-key")) {
            return trace;
        }
        RPCHook acl = new AclClientRPCHook(new SessionCredentials(a.required("access-key"),
            a.required("secret-key"), a.get("security-token", null)));
        if (trace == null) {
            return acl;
        }
        return new RPCHook() {
            @Override
            public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
                acl.doBeforeRequest(remoteAddr, request);
                trace.doBeforeRequest(remoteAddr, request);
            }

            @Override
            public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
                trace.doAfterResponse(remoteAddr, request, response);
            }
        };
    }

    /** acl-sign --access-key AK --secret-key SK [--security-token T] [--field k=v].. [--body-hex H]:
     *  one request through AclClientRPCHook; prints its extFields (AccessKey, Signature, ...). */
    static int aclSign(Args a) {
        RemotingCommand request = RemotingCommand.createRequestCommand(a.integer("code", 10), null);
        for (String kv : a.all("field")) {
            int eq = kv.indexOf('=');
            request.addExtField(kv.substring(0, eq), kv.substring(eq + 1));
        }
        String hex = a.get("body-hex", "");
        if (!hex.isEmpty()) {
            byte[] body = new byte[hex.length() / 2];
            for (int i = 0; i < body.length; i++) {
                body[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
            }
            request.setBody(body);
        }
        hook(a).doBeforeRequest("127.0.0.1:0", request);
        emit(obj("event", "signed", "extFields", new TreeMap<>(request.getExtFields())));
        return 0;
    }

    /** Prints each remoting request ("out": we sent it, "in": the server sent it to us) and reply. */
    static final class TraceHook implements RPCHook {
        static final Map<Integer, String> REQUESTS = codes("org.apache.rocketmq.common.protocol.RequestCode",
            "org.apache.rocketmq.remoting.protocol.RequestCode");
        static final Map<Integer, String> RESPONSES = codes("org.apache.rocketmq.remoting.protocol.RemotingSysResponseCode",
            "org.apache.rocketmq.common.protocol.ResponseCode", "org.apache.rocketmq.remoting.protocol.ResponseCode");

        @Override
        public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
            Map<String, Object> o = obj("event", "rpc", "dir", direction(), "addr", remoteAddr,
                "code", request.getCode(), "name", REQUESTS.get(request.getCode()), "opaque", request.getOpaque(),
                "oneway", request.isOnewayRPC(), "version", request.getVersion(),
                "language", String.valueOf(request.getLanguage()),
                "serialize", String.valueOf(request.getSerializeTypeCurrentRPC()),
                "header", header(request), "bodyLength", request.getBody() == null ? 0 : request.getBody().length);
            o.put("thread", Thread.currentThread().getName());
            emit(o);
        }

        @Override
        public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
            Map<String, Object> o = obj("event", "rpc-reply", "dir", direction(), "addr", remoteAddr,
                "code", request.getCode(), "name", REQUESTS.get(request.getCode()), "opaque", request.getOpaque());
            if (response != null) {
                o.put("responseCode", response.getCode());
                o.put("responseName", RESPONSES.get(response.getCode()));
                o.put("remark", response.getRemark());
                o.put("header", response.getExtFields());
                o.put("bodyLength", response.getBody() == null ? 0 : response.getBody().length);
            }
            emit(o);
        }

        /** "in" when the remoting layer is handling a request the server sent us (4.x runs it in
         *  NettyRemotingAbstract$1.run, 5.x in a lambda of buildProcessRequestHandler). */
        static String direction() {
            for (StackTraceElement e : new Throwable().getStackTrace()) {
                String k = e.getClassName();
                String m = e.getMethodName();
                if (k.startsWith("org.apache.rocketmq.remoting.netty.NettyRemotingAbstract")
                    && (m.contains("processRequestCommand") || m.contains("buildProcessRequestHandler")
                        || (k.endsWith("$1") && m.equals("run")))) {
                    return "in";
                }
            }
            return "out";
        }

        static Map<String, Object> header(RemotingCommand request) {
            Map<String, Object> out = new TreeMap<>();
            if (request.getExtFields() != null) {
                out.putAll(request.getExtFields());
            }
            CommandCustomHeader custom = request.readCustomHeader();
            for (Class<?> k = custom == null ? null : custom.getClass(); k != null && k != Object.class; k = k.getSuperclass()) {
                for (Field f : k.getDeclaredFields()) {
                    if (Modifier.isStatic(f.getModifiers())) {
                        continue;
                    }
                    try {
                        f.setAccessible(true);
                        Object v = f.get(custom);
                        if (v != null) {
                            out.put(f.getName(), v.toString());
                        }
                    } catch (ReflectiveOperationException | RuntimeException e) {
                        out.put(f.getName(), "?");
                    }
                }
            }
            return out;
        }

        static Map<Integer, String> codes(String... classes) {
            Map<Integer, String> out = new HashMap<>();
            for (String name : classes) {
                try {
                    for (Field f : Class.forName(name).getFields()) {
                        if (Modifier.isStatic(f.getModifiers()) && f.getType() == int.class) {
                            out.putIfAbsent(f.getInt(null), f.getName());
                        }
                    }
                } catch (ReflectiveOperationException e) {
                    // this version does not have that class
                }
            }
            return out;
        }
    }

    // ---- small helpers ------------------------------------------------------------------------

    static final class Args {
        final Map<String, List<String>> values = new HashMap<>();

        Args(String[] argv) {
            for (int i = 0; i < argv.length; i++) {
                if (!argv[i].startsWith("--")) {
                    throw new IllegalArgumentException("unexpected argument " + argv[i]);
                }
                String key = argv[i].substring(2);
                String value = "true";
                int eq = key.indexOf('=');
                if (eq >= 0) {
                    value = key.substring(eq + 1);
                    key = key.substring(0, eq);
                } else if (!key.equals("trace")) {
                    if (i + 1 >= argv.length) {
                        throw new IllegalArgumentException("--" + key + " needs a value");
                    }
                    value = argv[++i];
                }
                values.computeIfAbsent(key, k -> new ArrayList<>()).add(value);
            }
        }

        boolean has(String key) {
            return values.containsKey(key);
        }

        boolean flag(String key) {
            return has(key) && !values.get(key).get(0).equals("false");
        }

        String get(String key, String dflt) {
            List<String> v = values.get(key);
            return v == null ? dflt : v.get(v.size() - 1);
        }

        String required(String key) {
            String v = get(key, null);
            if (v == null) {
                throw new IllegalArgumentException("--" + key + " is required");
            }
            return v;
        }

        int integer(String key, int dflt) {
            return Integer.parseInt(get(key, Integer.toString(dflt)));
        }

        List<String> all(String key) {
            return values.getOrDefault(key, new ArrayList<>());
        }
    }

    static String sha256(byte[] data) {
        if (data == null) {
            return null;
        }
        try {
            StringBuilder sb = new StringBuilder();
            for (byte b : MessageDigest.getInstance("SHA-256").digest(data)) {
                sb.append(String.format("%02x", b));
            }
            return sb.toString();
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> o = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            o.put((String) kv[i], kv[i + 1]);
        }
        return o;
    }

    static synchronized void emit(Map<String, Object> o) {
        StringBuilder sb = new StringBuilder();
        json(sb, o);
        OUT.println(sb);
        OUT.flush();
    }

    static void json(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof Number || v instanceof Boolean) {
            sb.append(v);
        } else if (v instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                json(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof Collection) {
            sb.append('[');
            boolean first = true;
            for (Object item : (Collection<?>) v) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                json(sb, item);
            }
            sb.append(']');
        } else {
            String s = v.toString();
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c == '"' || c == '\\') {
                    sb.append('\\').append(c);
                } else if (c < 0x20) {
                    sb.append(String.format("\\u%04x", (int) c));
                } else {
                    sb.append(c);
                }
            }
            sb.append('"');
        }
    }
}
