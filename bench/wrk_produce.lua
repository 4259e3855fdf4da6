-- POST /v1/entries (100-byte body) or, with WRK_BATCH_FILE, /v1/entries/batch (that binary batch of
-- WRK_ENTRIES bodies), as a producer session per wrk thread: run with as many threads as connections,
-- so that each connection is one producer whose sequences follow each other (X-Raftlog-Producer-Id
-- WRK_PRODUCER_BASE + the thread's number, X-Raftlog-Sequence counting up by WRK_ENTRIES). Without
-- WRK_PRODUCER_BASE, the same requests without the session's headers: the cost of the headers alone.
dofile(os.getenv("WRK_REPORT"))
local batch_file = os.getenv("WRK_BATCH_FILE")
local base = tonumber(os.getenv("WRK_PRODUCER_BASE") or "")
local per_request = tonumber(os.getenv("WRK_ENTRIES") or "1")
wrk.method = "POST"
if batch_file then
  local file = assert(io.open(batch_file, "rb"))
  wrk.body = file:read("*a")
  file:close()
  wrk.headers["Content-Type"] = "application/vnd.raftlog.batch"
else
  wrk.body = string.rep("x", 100)
  wrk.headers["Content-Type"] = "application/octet-stream"
end

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("number", threads)
end

local sequence = 0
function request()
  local headers = {}
  for name, value in pairs(wrk.headers) do
    headers[name] = value
  end
  if base then
    headers["X-Raftlog-Producer-Id"] = string.format("%d", base + number)
    headers["X-Raftlog-Sequence"] = string.format("%d", sequence)
    sequence = sequence + per_request
  end
  return wrk.format(nil, nil, headers, nil)
end
