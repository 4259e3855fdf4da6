-- POST /v3/kv/range for random keys among the WRK_MAX_INDEX + 1 the benchmark wrote (as base64_number(i, 8)).
dofile(os.getenv("WRK_REPORT"))
local max_index = tonumber(os.getenv("WRK_MAX_INDEX"))
request = function()
  return wrk.format("POST", "/v3/kv/range", { ["Content-Type"] = "application/json" },
    '{"key":"' .. base64_number(math.random(0, max_index), 8) .. '"}')
end
