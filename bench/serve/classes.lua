-- Plans cycling over 10,000 distinct classes (2,000 pipe-ops values x 5 collectives), for the RSS
-- check after 10^6 requests.
local counter = 0
local colls = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce"}
request = function()
  counter = counter + 1
  local k = counter % 10000
  local body = string.format('{"node":"h100","coll":"%s","pipe_ops":%d,"bytes":%d}',
    colls[(k % 5) + 1], math.floor(k / 5) + 1, 1024 * (counter % 4096 + 1))
  return wrk.format("POST", "/v1/plan", {["Content-Type"] = "application/json"}, body)
end
