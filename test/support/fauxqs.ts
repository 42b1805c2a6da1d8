/** The fauxqs starter lives in the library (lib/aws/local/servers.ts): `--target local-aws` uses it too. */
export { startFauxqs } from '../../lib/aws/local/servers.ts';
