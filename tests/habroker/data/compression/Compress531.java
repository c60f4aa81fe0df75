import java.nio.charset.StandardCharsets;
import java.util.Base64;
import org.apache.rocketmq.common.compression.*;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
public class Compress531 {
  public static void main(String[] a) throws Exception {
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < 300; i++) sb.append("order-").append(i).append(" qty=").append(i * 7 % 13).append(";\n");
    byte[] body = sb.toString().getBytes(StandardCharsets.UTF_8);
    System.out.println("body " + Base64.getEncoder().encodeToString(body));
    for (CompressionType t : CompressionType.values()) {
      byte[] c = CompressorFactory.getCompressor(t).compress(body, 5);
      int flag = MessageSysFlag.COMPRESSED_FLAG | t.getCompressionFlag();
      System.out.println(t + " " + flag + " " + Base64.getEncoder().encodeToString(c));
    }
  }
}
