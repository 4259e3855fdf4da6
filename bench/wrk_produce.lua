-- POST /v1/entries (100-byte body) or, with WRK_BATCH_FILE, /v1/entries/batch (that binary batch of
-- WRK_ENTRIES bodies), as a producer session per wrk thread: run with as many threads as connections,
-- so that each connection is one producer whose sequences follow each other (X-Raftlog-Producer-Id
-- WRK_PRODUCER_BASE + the thread's number, X-Raftlog-Sequence counting up by WRK_ENTRIES). With
-- WRK_PLAIN set, the same requests, the same bytes and the same work for wrk, but under header names
-- the members ignore: what the sessions cost the members, and nothing else.
dofile(os.getenv("WRK_REPORT"))
local batch_file = os.getenv("WRK_BATCH_FILE")
local base = tonumber(os.getenv("WRK_PRODUCER_BASE"))
local id_header, sequence_header = "X-Raftlog-Producer-Id", "X-Raftlog-Sequence"
if os.getenv("WRK_PLAIN") then
  id_header, sequence_header = "X-Raftlog-Unused-Idxx", "X-Raftlog-Unusedxxx"
end
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

local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("number", #threads)
end

-- the first refusal a thread met, shown at the end (a producer's later appends are refused after it)
first_refusal = nil
function response(status, headers, body)
  if status >= 300 and not first_refusal then
    first_refusal = string.format("%d %s", status, body)
  end
end

local report = done
function done(summary, latency, requests)
  for _, thread in ipairs(threads) do
    local refusal = thread:get("first_refusal")
    if refusal then
      io.stderr:write("wrk_produce: thread ", thread:get("number"), ": ", refusal, "\n")
    end
  end
  report(summary, latency, requests)
end

local sequence = 0
function request()
  local headers = {}
  for name, value in pairs(wrk.headers) do
    headers[name] = value
  end
  headers[id_header] = string.format("%d", base + number)
  headers[sequence_header] = string.format("%d", sequence)
  sequence = sequence + per_request
  return wrk.format(nil, nil, headers, nil)
end
