/**
 * A local stand-in for the ingest function's Function URL / HTTP API: each HTTP request
 * becomes the APIGatewayProxyEventV2 that API Gateway would pass (payload format 2.0:
 * lower-case headers, raw path and query, body base64-encoded), and the handler's
 * structured result becomes the HTTP response. Bodies above HTTP API's 10 MB payload
 * limit are refused with 413 before the handler runs, as API Gateway would.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';

export type ProxyHandler = (event: APIGatewayProxyEventV2) => Promise<APIGatewayProxyStructuredResultV2>;

/** HTTP API's request payload limit. */
export const MAX_PAYLOAD_BYTES = 10 * 1024 * 1024;

export interface FunctionUrlServer {
  readonly url: string;
  close(): Promise<void>;
}

type OnRequest = (result: APIGatewayProxyStructuredResultV2, billedMs: number, event: APIGatewayProxyEventV2) => void;

export async function startFunctionUrl(handler: ProxyHandler, options: { port?: number; host?: string; onRequest?: OnRequest } = {}): Promise<FunctionUrlServer> {
  const server = createServer((req, res) => {
    void serve(handler, req, res, options.onRequest).catch((e) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: 'internal', message: (e as Error).message }));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${host}:${addr.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function serve(handler: ProxyHandler, req: IncomingMessage, res: ServerResponse, onRequest?: OnRequest): Promise<void> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_PAYLOAD_BYTES) {
      res.writeHead(413, { 'content-type': 'application/json', connection: 'close' });
      res.end(JSON.stringify({ message: 'Request Entity Too Large' }));
      req.destroy();
      return;
    }
    chunks.push(c as Buffer);
  }
  const t0 = performance.now();
  const event = toEvent(req, Buffer.concat(chunks));
  const result = await handler(event);
  onRequest?.(result, Math.ceil(performance.now() - t0), event);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(result.headers ?? {})) headers[k] = String(v);
  res.writeHead(result.statusCode ?? 200, headers);
  res.end(result.body === undefined ? undefined : Buffer.from(result.body, result.isBase64Encoded ? 'base64' : 'utf8'));
}

export function toEvent(req: IncomingMessage, body: Buffer): APIGatewayProxyEventV2 {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers)) if (v !== undefined) headers[k.toLowerCase()] = Array.isArray(v) ? v.join(',') : v;
  const query: Record<string, string> = {};
  for (const [k, v] of url.searchParams) query[k] = k in query ? `${query[k]},${v}` : v;
  const now = Date.now();
  const method = req.method ?? 'GET';
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: url.pathname,
    rawQueryString: url.search.slice(1),
    headers,
    ...(Object.keys(query).length ? { queryStringParameters: query } : {}),
    requestContext: {
      accountId: '000000000000',
      apiId: 'local',
      domainName: headers.host ?? 'localhost',
      domainPrefix: (headers.host ?? 'localhost').split('.')[0],
      http: { method, path: url.pathname, protocol: `HTTP/${req.httpVersion}`, sourceIp: req.socket.remoteAddress ?? '127.0.0.1', userAgent: headers['user-agent'] ?? '' },
      requestId: randomUUID(),
      routeKey: '$default',
      stage: '$default',
      time: new Date(now).toUTCString(),
      timeEpoch: now,
    },
    ...(body.length ? { body: body.toString('base64'), isBase64Encoded: true } : { isBase64Encoded: false }),
  };
}
