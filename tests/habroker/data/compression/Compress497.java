import java.nio.charset.StandardCharsets;
import java.util.Base64;
import org.apache.rocketmq.common.UtilAll;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
public class Compress497 {
  public static void main(String[] a) throws Exception {
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < 300; i++) sb.append("order-").append(i).append(" qty=").append(i * 7 % 13).append(";\n");
    byte[] body = sb.toString().getBytes(StandardCharsets.UTF_8);
    System.out.println("body " + Base64.getEncoder().encodeToString(body));
    // what DefaultMQProducerImpl.tryToCompressMessage does in 4.9.7: UtilAll.compress(body, zipCompressLevel=5)
    System.out.println("ZLIB_4.9.7 " + MessageSysFlag.COMPRESSED_FLAG + " " + Base64.getEncoder().encodeToString(UtilAll.compress(body, 5)));
  }
}
