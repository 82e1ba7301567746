"""ServerBench: coding-session workloads, closed-loop replay, servers, value (PROTOCOL B)."""
