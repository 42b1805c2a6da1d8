/** `--from s3://...`: the bucket and prefix of a savepoint's location, and what is refused. */
import { describe, expect, it } from 'vitest';
import { parseS3SavepointUri } from '../../lib/cli/savepoint-uri.ts';
import { ConfigError } from '../../lib/errors.ts';

describe('parseS3SavepointUri', () => {
  it('splits bucket and prefix, the prefix ending in "/"', () => {
    expect(parseS3SavepointUri('s3://my-bucket/counts/savepoints/v1/')).toEqual({ bucket: 'my-bucket', prefix: 'counts/savepoints/v1/' });
    expect(parseS3SavepointUri('s3://my-bucket/counts/savepoints/v1')).toEqual({ bucket: 'my-bucket', prefix: 'counts/savepoints/v1/' });
    expect(parseS3SavepointUri('s3://my-bucket')).toEqual({ bucket: 'my-bucket', prefix: '' });
  });
  it('leaves directories and labels alone', () => {
    expect(parseS3SavepointUri('ck/savepoints/v1')).toBeUndefined();
    expect(parseS3SavepointUri('v1')).toBeUndefined();
  });
  it('names the flag and what it expected for a malformed URI', () => {
    expect(() => parseS3SavepointUri('s3://x')).toThrow(ConfigError);
    expect(() => parseS3SavepointUri('s3://MyBucket/p/')).toThrow(ConfigError);
    expect(() => parseS3SavepointUri('s3://Bad_Bucket/p/')).toThrow(/--from: expected s3:\/\/<bucket>\/<prefix>\/.*received "s3:\/\/Bad_Bucket\/p\/"/);
  });
});
