-- POST /v3/kv/txn: WRK_TXN_OPS puts of a 100-byte value, each under a new key (etcd's JSON gateway).
dofile(os.getenv("WRK_REPORT"))
local value = os.getenv("WRK_VALUE_B64")
local ops = tonumber(os.getenv("WRK_TXN_OPS"))
thread_id, counter = 0, 0  -- thread_id: a global, set by setup() per thread
function setup(thread)
  thread:set("thread_id", math.random(0, 2 ^ 20))
end
request = function()
  local puts = {}
  for i = 1, ops do
    counter = counter + 1
    puts[i] = '{"requestPut":{"key":"' .. base64_number(thread_id, 4) .. base64_number(counter, 8)
        .. '","value":"' .. value .. '"}}'
  end
  return wrk.format("POST", "/v3/kv/txn", { ["Content-Type"] = "application/json" },
    '{"success":[' .. table.concat(puts, ",") .. ']}')
end
