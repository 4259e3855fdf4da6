-- POST /v1/topics/<topic>/messages: one message of a 100-byte body, an 8-byte key and one 8-byte tag,
-- each request's key the next of 4096 (so the messages spread over the topic's queues).
dofile(os.getenv("WRK_REPORT"))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local body = string.rep("x", 100)
local counter = 0
function request()
  counter = counter + 1
  local key = string.format("k%07d", counter % 4096)
  return wrk.format(nil, nil, nil,
    '{"messages":[{"body":"' .. body .. '","keys":["' .. key .. '"],"tags":["tag-0001"]}]}')
end
