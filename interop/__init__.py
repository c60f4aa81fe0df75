"""Real Apache RocketMQ (Java) next to habroker: install.sh, the driver, and the Python helpers
(:mod:`interop.rocketmq_java`) shared by the interop tests and the benchmarks."""
