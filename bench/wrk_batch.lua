-- POST a batch: the bytes in the file WRK_BATCH_FILE, as they are, on every request: the load costs wrk
-- a copy, not an encoding. /v1/entries/batch's binary batch (u32 length + body each) by default, or
-- another form under WRK_CONTENT_TYPE (a topic's JSON batch of messages).
dofile(os.getenv("WRK_REPORT"))
local file = assert(io.open(os.getenv("WRK_BATCH_FILE"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = os.getenv("WRK_CONTENT_TYPE") or "application/vnd.raftlog.batch"
