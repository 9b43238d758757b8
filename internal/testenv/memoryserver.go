package testenv

// MemoryServer is a Python program whose state lives only in its memory:
// a value drawn at its start and a counter, which it tells whoever
// connects to 127.0.0.1:7000 as "VALUE COUNT" (in a gVisor sandbox of
// memory snapshots, gVisor's own loopback). Run it with /usr/bin/python3
// -c (RequireHostPython).
const MemoryServer = `
import socket, threading, time, uuid
secret, n = uuid.uuid4().hex, 0
def count():
    global n
    while True:
        n += 1
        time.sleep(0.02)
threading.Thread(target=count, daemon=True).start()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7000))
s.listen()
while True:
    c, _ = s.accept()
    c.sendall(("%s %d\n" % (secret, n)).encode())
    c.close()
`

// AskMemoryServer is the command that prints MemoryServer's answer.
var AskMemoryServer = []string{"/usr/bin/python3", "-c", `import socket; print(socket.create_connection(("127.0.0.1", 7000), 2).recv(100).decode())`}
