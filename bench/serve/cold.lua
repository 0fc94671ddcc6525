-- A class never seen before on every request: an explain whose class is priced (menu) and
-- compiled first. Classes differ by pipe ops (1..65536) and collective; each wrk thread and
-- connection counts on from its own start, so no class repeats within a run of up to 327,680
-- requests (the service's cache must not hold them: start it fresh).
local counter = 0
local colls = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce"}
request = function()
  counter = counter + 1
  local body = string.format('{"node":"h100","nodes":2,"coll":"%s","pipe_ops":%d,"bytes":65536}',
    colls[(counter % 5) + 1], math.floor(counter / 5) % 65536 + 1)
  return wrk.format("POST", "/v1/explain", {["Content-Type"] = "application/json"}, body)
end
