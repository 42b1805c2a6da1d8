/**
 * Preloaded (NODE_OPTIONS=--require) into `cdk synth` and the app it starts, so the
 * offline test proves offline: every connection to a non-loopback host fails and is
 * recorded (one line per attempt) in the file named by SLUICE_NETWORK_LOG.
 */
const fs = require('node:fs');
const net = require('node:net');

const LOOPBACK = new Set(['localhost', '127.0.0.1', '::1', '0.0.0.0']);
const log = process.env.SLUICE_NETWORK_LOG;
const connect = net.Socket.prototype.connect;

net.Socket.prototype.connect = function (...args) {
  const first = args[0];
  const options = Array.isArray(first) ? first[0] : typeof first === 'object' && first !== null ? first : { port: first, host: typeof args[1] === 'string' ? args[1] : undefined };
  if (options && !options.path) {
    const host = options.host ?? 'localhost';
    if (!LOOPBACK.has(host)) {
      if (log) fs.appendFileSync(log, `${process.pid} ${process.argv.slice(1, 3).join(' ')} -> ${host}:${options.port}\n`);
      process.nextTick(() => this.destroy(new Error(`network blocked by the offline synth test: ${host}`)));
      return this;
    }
  }
  return connect.apply(this, args);
};
