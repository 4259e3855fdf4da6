-- POST /v1/entries/batch: the binary batch in the file WRK_BATCH_FILE (u32 length + body each), as
-- it is, on every request: the load costs wrk a copy, not an encoding.
dofile(os.getenv("WRK_REPORT"))
local file = assert(io.open(os.getenv("WRK_BATCH_FILE"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/vnd.raftlog.batch"
