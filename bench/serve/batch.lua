-- A batch of 1,000 plans per request: one cached class (h200 x4 AllReduce), 1,000 sizes.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local q = {}
for i = 1, 1000 do
  q[#q + 1] = string.format('{"node":"h200","nodes":4,"bytes":%d}', i * 4099)
end
wrk.body = "[" .. table.concat(q, ",") .. "]"
