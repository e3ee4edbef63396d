// node_cluster.js -- a Node.js cluster (node:cluster): a primary that forks
// N worker processes, each its own event loop, for
// tests/tracer/test_group.py (record --children).
//
//     node node_cluster.js [N]
//
// The primary prints "pid P", then each worker "worker PID port PORT" once
// it serves: each worker listens on a port of its own, so that a client
// picks the process.  SIGUSR2 to the primary forks one more worker (SIGUSR1
// is Node's debugger signal); SIGTERM ends them all.  A client sends a
// route and a newline; the answer is "done ROUTE T0 T1 CPU PID" (T0..T1:
// CLOCK_MONOTONIC ns around the work; CPU its process's CPU time in ns).
//
//     sleep   Atomics.wait for 50 ms on the loop thread (blocks its loop)
//     good    a 50 ms timer                              (does not block)
'use strict';
const cluster = require('node:cluster');
const net = require('node:net');

if (cluster.isPrimary) {
  console.log(`pid ${process.pid}`);
  const fork = () => cluster.fork().on('message', (m) => console.log(m));
  const n = Number(process.argv[2] || 2);
  for (let i = 0; i < n; i++) fork();
  process.on('SIGUSR2', fork);
  process.on('SIGTERM', () => {
    for (const id in cluster.workers) cluster.workers[id].process.kill();
    process.exit(0);
  });
} else {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) * 1000; };
  const server = net.createServer((c) => {
    c.once('data', (d) => {
      const route = d.toString().trim();
      const t0 = process.hrtime.bigint(), c0 = cpu();
      const answer = () => {
        c.end(`done ${route} ${t0} ${process.hrtime.bigint()} ${cpu() - c0} ${process.pid}\n`);
      };
      if (route === 'sleep') {
        Atomics.wait(cell, 0, 0, 50);
        answer();
      } else {
        setTimeout(answer, 50);
      }
    });
  });
  server.listen({ port: 0, host: '127.0.0.1', exclusive: true }, () => {
    process.send(`worker ${process.pid} port ${server.address().port}`);
  });
}
