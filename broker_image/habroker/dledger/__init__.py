"""DLedger mode: a quorum-replicated commit log with leader election (openmessaging DLedger
0.3.1.2 as RocketMQ 4.9/5.x embed it), wire- and file-compatible with Java peers."""
