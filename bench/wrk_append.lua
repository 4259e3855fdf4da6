-- POST /v1/entries with a 100-byte raw body.
dofile(os.getenv("WRK_REPORT"))
wrk.method = "POST"
wrk.body = string.rep("x", 100)
wrk.headers["Content-Type"] = "application/octet-stream"
