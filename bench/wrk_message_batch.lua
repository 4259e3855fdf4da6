-- POST /v1/topics/<topic>/messages: the batch in the file WRK_BATCH_FILE (its JSON, as it is) on every
-- request: the load costs wrk a copy, not an encoding.
dofile(os.getenv("WRK_REPORT"))
local file = assert(io.open(os.getenv("WRK_BATCH_FILE"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
