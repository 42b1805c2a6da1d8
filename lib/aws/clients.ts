/**
 * The configuration every AWS client of a Lambda handler is built with (functions/*.ts):
 * the SDK's adaptive retry mode (throttled calls retried with client-side rate limiting
 * before a failure reaches the handler, whose own backoff then takes over,
 * group-backoff.ts), and an HTTP handler with a connection timeout, a request timeout
 * that throws, and keep-alive sockets. Without the timeouts the SDK waits for a dead
 * connection until the function itself times out, and the whole batch with it; with
 * them the attempt fails with a TimeoutError the SDK retries and the handler classifies
 * (errors.ts, transport-errors.ts).
 *
 * The values come from the environment SluiceJob sets on every function from its timeout
 * (infra/handler-environment.ts, `sdkTimeouts`); outside Lambda the defaults apply.
 */
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { ConfigError } from '../errors.ts';

/** The variables the timeouts are read from (set by infra/handler-environment.ts). */
export const SDK_TIMEOUT_ENV = {
  connectionTimeoutMs: 'SLUICE_SDK_CONNECTION_TIMEOUT_MS',
  requestTimeoutMs: 'SLUICE_SDK_REQUEST_TIMEOUT_MS',
} as const;

export interface SdkTimeouts {
  /** Longest wait for a TCP/TLS connection, ms. */
  readonly connectionTimeoutMs: number;
  /** Longest time from sending a request to its complete response, ms. */
  readonly requestTimeoutMs: number;
}

/** What a 30-second function gets (infra/handler-environment.ts scales them to the function's timeout). */
export const DEFAULT_SDK_TIMEOUTS: SdkTimeouts = { connectionTimeoutMs: 3_000, requestTimeoutMs: 7_500 };

/** Sockets per client and host: a handler's sends run in parallel per partition. */
const MAX_SOCKETS = 50;

function readMs(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 1) throw new ConfigError(name, 'a whole number of milliseconds, at least 1', JSON.stringify(raw));
  return n;
}

/** The timeouts the environment names; a malformed value is a ConfigError naming the variable. */
export function sdkTimeoutsFromEnv(env: NodeJS.ProcessEnv = process.env): SdkTimeouts {
  return {
    connectionTimeoutMs: readMs(env, SDK_TIMEOUT_ENV.connectionTimeoutMs, DEFAULT_SDK_TIMEOUTS.connectionTimeoutMs),
    requestTimeoutMs: readMs(env, SDK_TIMEOUT_ENV.requestTimeoutMs, DEFAULT_SDK_TIMEOUTS.requestTimeoutMs),
  };
}

/** The HTTP handler of one client (each client gets its own: destroying a client destroys its handler). */
export function sdkRequestHandler(t: SdkTimeouts): NodeHttpHandler {
  return new NodeHttpHandler({
    connectionTimeout: t.connectionTimeoutMs,
    requestTimeout: t.requestTimeoutMs,
    // Without it a request past requestTimeout only logs a warning.
    throwOnRequestTimeout: true,
    // Reusing connections saves a TLS handshake per call; http for local endpoints (AWS_ENDPOINT_URL).
    httpsAgent: new HttpsAgent({ keepAlive: true, maxSockets: MAX_SOCKETS }),
    httpAgent: new HttpAgent({ keepAlive: true, maxSockets: MAX_SOCKETS }),
  });
}

/**
 * The options of a handler's client: `new DynamoDBClient(handlerClientConfig())`. A
 * fresh object (and HTTP handler) per call.
 */
export function handlerClientConfig(timeouts: SdkTimeouts = sdkTimeoutsFromEnv()): { retryMode: 'adaptive'; requestHandler: NodeHttpHandler } {
  return { retryMode: 'adaptive', requestHandler: sdkRequestHandler(timeouts) };
}
