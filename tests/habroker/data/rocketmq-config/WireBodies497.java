import java.util.*;
import org.apache.rocketmq.common.protocol.route.*;
import org.apache.rocketmq.common.admin.*;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.RemotingSerializable;
public class Wire497 {
  public static void main(String[] a) {
    TopicRouteData r = new TopicRouteData();
    BrokerData b = new BrokerData(); b.setCluster("DefaultCluster"); b.setBrokerName("broker-a");
    HashMap<Long,String> addrs = new HashMap<>(); addrs.put(0L, "127.0.0.1:10911"); addrs.put(1L, "127.0.0.2:10911");
    b.setBrokerAddrs(addrs);
    r.setBrokerDatas(new ArrayList<>(Collections.singletonList(b)));
    QueueData q = new QueueData(); q.setBrokerName("broker-a"); q.setReadQueueNums(4); q.setWriteQueueNums(4); q.setPerm(6);
    r.setQueueDatas(new ArrayList<>(Collections.singletonList(q)));
    r.setFilterServerTable(new HashMap<>());
    System.out.println("route " + r.toJson(false));
    System.out.println("routepretty " + r.toJson(true).replace("\n", "\\n").replace("\t", "\\t"));
    ConsumeStats c = new ConsumeStats();
    OffsetWrapper w = new OffsetWrapper(); w.setBrokerOffset(10); w.setConsumerOffset(7); w.setLastTimestamp(1700000000000L);
    c.getOffsetTable().put(new MessageQueue("T\"x", "broker-a", 0), w);
    c.setConsumeTps(1.5);
    System.out.println("consumestats " + c.toJson(false));
    System.out.println("consumestatspretty " + c.toJson(true).replace("\n", "\\n").replace("\t", "\\t"));
    HashMap<String,Object> m = new HashMap<>();
    m.put("s", "a\"b\\c\n\u0001é/\u2028"); m.put("neg", Collections.singletonMap(-5, -7L)); m.put("list", Arrays.asList(new TopicConfig("A",1,1,6), 3));
    m.put("d", 0.1); m.put("big", 12345678901234567L); m.put("e", new HashMap<>()); m.put("l", new ArrayList<>());
    System.out.println("misc " + RemotingSerializable.toJson(m, false));
    System.out.println("miscpretty " + RemotingSerializable.toJson(m, true).replace("\n", "\\n").replace("\t", "\\t"));
  }
}
