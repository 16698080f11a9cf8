#!/usr/bin/env python3
"""benches/first_answer.py PORT NAME PIDFILE LOG CMD...: execs CMD (in a session of its own,
output to LOG, its pid written to PIDFILE) and sends an A query for NAME to 127.0.0.1:PORT
every 2 ms until an answer with data comes back; prints the milliseconds from the exec to that
answer. Started by the bench scripts so that the clock starts at the exec, not after an
interpreter's own start-up. Exits 1 if CMD exits or FIRST_ANSWER_LIMIT seconds (default 180)
pass first."""
import os, socket, struct, subprocess, sys, time

port, name, pidfile, log, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
q = struct.pack(">HHHHHH", 0x5151, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.002)
t0 = time.monotonic()
p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
open(pidfile, "w").write(str(p.pid))
limit = float(os.environ.get("FIRST_ANSWER_LIMIT", "180"))
while time.monotonic() - t0 < limit and p.poll() is None:
    try:
        s.sendto(q, ("127.0.0.1", port))
        r = s.recv(512)
        if len(r) >= 12 and r[:2] == q[:2] and r[3] & 0x0F == 0 and struct.unpack(">H", r[6:8])[0] > 0:
            print(round((time.monotonic() - t0) * 1000))
            sys.exit(0)
    except OSError:
        pass
sys.exit(1)
