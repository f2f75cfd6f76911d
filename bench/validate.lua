-- wrk script: POST /v1/validate with a typical basic spec (bench/report.py runs it).
wrk.method = "POST"
wrk.body = '{"tier":"basic","spec":{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3},{"type":"json_path","path":"$.status","op":"eq","value":"done"}]}}'
wrk.headers["Content-Type"] = "application/json"
