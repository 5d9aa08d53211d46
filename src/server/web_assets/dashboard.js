// /metrics.json
