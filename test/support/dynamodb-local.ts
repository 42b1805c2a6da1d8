/** The DynamoDB Local starter lives in the library (lib/aws/local/servers.ts): `--target local-aws` uses it too. */
export { dynamoDbLocalDir, freePort, LOCAL_CREDENTIALS, LOCAL_REGION, type LocalServer, SIMULATOR_PACKAGE, startDynamoDbLocal } from '../../lib/aws/local/servers.ts';
