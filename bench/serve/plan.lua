-- One cached plan per request: the same class (h100, 1 node, AllReduce float32 sum) and size.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"node":"h100","coll":"allreduce","bytes":1048576}'
