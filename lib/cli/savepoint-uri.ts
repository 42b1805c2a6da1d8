/**
 * A savepoint location the user passes to `--from`: a directory, or an S3 URI
 * (`s3://<bucket>/<prefix>/`, where a local-aws or aws run keeps its savepoints:
 * `s3://<bucket>/<job>/savepoints/<label>/`). Both hold the one savepoint format
 * (lib/checkpoint/savepoint.ts), so either runtime restores from either.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import type { BlobStore } from '../checkpoint/storage.ts';
import { ConfigError } from '../errors.ts';

export interface S3SavepointLocation {
  readonly bucket: string;
  /** Keys of the savepoint start with it (ends with "/"; "" for the bucket's root). */
  readonly prefix: string;
}

/** The bucket and prefix of an `s3://` location, or undefined for anything else (a directory). */
export function parseS3SavepointUri(from: string): S3SavepointLocation | undefined {
  if (!/^s3:\/\//i.test(from)) return undefined;
  const m = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:\/(.*))?$/.exec(from);
  if (!m) throw new ConfigError('--from', 's3://<bucket>/<prefix>/ (a bucket name of 3 to 63 lowercase letters, digits, "." or "-")', JSON.stringify(from));
  const path = (m[2] ?? '').replace(/^\/+/, '');
  return { bucket: m[1], prefix: path === '' || path.endsWith('/') ? path : `${path}/` };
}

/**
 * The bucket as a BlobStore whose S3 client is made at its first use (the SDK is loaded only
 * then; endpoints and credentials from the SDK's usual variables, AWS_ENDPOINT_URL_S3 for local-aws).
 */
export function lazyS3Store(bucket: string, client: () => Promise<S3Client> = defaultClient): BlobStore {
  let store: Promise<BlobStore> | undefined;
  const get = () =>
    (store ??= (async () => {
      const { S3BlobStore } = await import('../aws/s3/s3-blob-store.ts');
      return new S3BlobStore({ s3: await client(), bucket });
    })());
  return {
    put: async (k, b) => (await get()).put(k, b),
    get: async (k) => (await get()).get(k),
    list: async (p) => (await get()).list(p),
    delete: async (ks) => (await get()).delete(ks),
  };
}

async function defaultClient(): Promise<S3Client> {
  const { S3Client } = await import('@aws-sdk/client-s3');
  // A local S3 server (AWS_ENDPOINT_URL_S3) takes path-style addresses only.
  return new S3Client({ forcePathStyle: process.env.AWS_ENDPOINT_URL_S3 ? true : undefined });
}
