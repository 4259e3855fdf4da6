-- POST /v3/kv/put with a 100-byte value under a new key each time (etcd's JSON gateway).
dofile(os.getenv("WRK_REPORT"))
local value = os.getenv("WRK_VALUE_B64")
thread_id, counter = 0, 0  -- thread_id: a global, set by setup() per thread
function setup(thread)
  thread:set("thread_id", math.random(0, 2 ^ 20))
end
request = function()
  counter = counter + 1
  return wrk.format("POST", "/v3/kv/put", { ["Content-Type"] = "application/json" },
    '{"key":"' .. base64_number(thread_id, 4) .. base64_number(counter, 8) .. '","value":"' .. value .. '"}')
end
