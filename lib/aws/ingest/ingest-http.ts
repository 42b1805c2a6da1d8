/** The ingest function's side of HTTP API v2 / Function URL events: path, headers, the result. */
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import type { IngestAnswer } from '../../transport/ingest-validation.ts';

/** The path without an API Gateway stage prefix (`/prod/streams/...` on a named stage). */
export function requestPath(event: APIGatewayProxyEventV2): string {
  const path = event.rawPath ?? '/';
  const stage = event.requestContext?.stage;
  if (stage && stage !== '$default' && path.startsWith(`/${stage}/`)) return path.slice(stage.length + 1);
  return path;
}

/** HTTP API v2 lowercases header names; Function URLs too. Be lenient anyway. */
export function header(event: APIGatewayProxyEventV2, name: string): string | undefined {
  const h = event.headers ?? {};
  if (h[name] !== undefined) return h[name];
  for (const k of Object.keys(h)) if (k.toLowerCase() === name) return h[k];
  return undefined;
}

export function toResult(event: APIGatewayProxyEventV2, a: IngestAnswer): APIGatewayProxyStructuredResultV2 {
  const head = event.requestContext?.http?.method === 'HEAD';
  return { statusCode: a.status, headers: { 'Content-Type': 'application/json; charset=utf-8', ...a.headers }, body: head ? '' : JSON.stringify(a.body) };
}
