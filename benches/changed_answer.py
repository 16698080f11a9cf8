#!/usr/bin/env python3
"""benches/changed_answer.py PORT NAME ADDR TRIGGER...: starts the clock, pulls the trigger
(`sighup PID` sends SIGHUP from this process; anything else is run as a command), then sends
an A query for NAME to 127.0.0.1:PORT every 1 ms until the answer holds the IPv4 address ADDR;
prints the milliseconds from the trigger to that answer. Exits 1 if 60 s pass first."""
import os, signal, socket, struct, subprocess, sys, time

port, name, addr, trigger = int(sys.argv[1]), sys.argv[2], socket.inet_aton(sys.argv[3]), sys.argv[4:]
q = struct.pack(">HHHHHH", 0x5252, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.001)
t0 = time.monotonic()
if trigger[0] == "sighup":
    os.kill(int(trigger[1]), signal.SIGHUP)
else:
    subprocess.Popen(trigger, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while time.monotonic() - t0 < 60:
    try:
        s.sendto(q, ("127.0.0.1", port))
        r = s.recv(512)
        if r[:2] == q[:2] and r[3] & 0x0F == 0 and addr in r[12:]:
            print(round((time.monotonic() - t0) * 1000, 1))
            sys.exit(0)
    except OSError:
        pass
sys.exit(1)
