// node_server.js -- a plain Node.js (no npm packages) line-protocol server
// with one blocking bug per route, for tests/tracer/test_generic.py.
//
//     node node_server.js FILE
//
// Prints "pid N" and "port P", then serves on 127.0.0.1 until killed.  A
// client sends a route and a newline; the answer is
//
//     done ROUTE T0 T1 CPU EXTRA
//
// where T0..T1 is the handler's own CLOCK_MONOTONIC interval in ns
// (process.hrtime is libuv's uv_hrtime: CLOCK_MONOTONIC), CPU the
// process's CPU time (ns, every thread) over it, EXTRA route specific.
//
//     route    work                                          loop thread
//     read     fs.readFileSync(FILE) (EXTRA: bytes read)     off- or on-CPU
//     spin     ~60 ms of CPU, allocating nothing             on-CPU
//     atomics  Atomics.wait on a SharedArrayBuffer, 50 ms     off-CPU (futex)
//     good     setTimeout 50 ms                              not blocked
'use strict';
const fs = require('fs');
const net = require('net');

const file = process.argv[2];
const i32 = new Int32Array(new SharedArrayBuffer(4));

function now() { return process.hrtime.bigint(); }
function cpu() { const u = process.cpuUsage(); return BigInt(u.user + u.system) * 1000n; }

function readBig() {
  const b = fs.readFileSync(file);
  return b.length;
}

// CPU work that allocates next to nothing (Smi arithmetic: no GC, whose
// safepoint waits would be off-CPU episodes of their own), until the
// process has used 60 ms of CPU time since the spin began.  Not a count
// sized at startup: V8 optimizes burn later, in a compiler thread that a
// busy machine delays, and a count sized on the slower code spun 10 ms.
// The test compares the trace with the main thread's own CPU time (/proc
// schedstat), not with this figure.
function burn(millions) {
  let x = 0;
  for (let m = 0; m < millions; m++)
    for (let i = 0; i < 1000000; i++) x = (x + i) & 0xffff;
  return x;
}

function spin() {           // burn(8): about 6 ms once optimized, so the
  const c0 = cpu();          // CPU clock is read (an allocation) ~10 times
  let x = 0;
  while (cpu() - c0 < 60000000n) x ^= burn(8);
  return x;
}

function atomicsWait() {
  return Atomics.wait(i32, 0, 0, 50);   // "timed-out"
}

const routes = { read: readBig, spin: spin, atomics: atomicsWait };

function onConnection(sock) {
  let buf = '';
  sock.on('data', function onData(d) {
    buf += d;
    const nl = buf.indexOf('\n');
    if (nl < 0) return;
    const route = buf.slice(0, nl).trim();
    const t0 = now(), c0 = cpu();
    const answer = (extra) => {
      const t1 = now(), c1 = cpu();
      sock.end(`done ${route} ${t0} ${t1} ${c1 - c0} ${extra}\n`);
    };
    if (routes[route]) answer(routes[route]());
    else if (route === 'good') setTimeout(() => answer(0), 50);
    else sock.end(`unknown ${route}\n`);
  });
}

const server = net.createServer(onConnection);
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`pid ${process.pid}\nport ${server.address().port}\n`);
});
