// ioredis against a cachecast Redis door. Run by test/clients_test.go:
// node ioredis.mjs SOCKET PREFIX. Prints "ok" when every check passed;
// throws (exit code 1) otherwise.
import assert from 'node:assert/strict';
import Redis from 'ioredis';

const [sock, prefix] = process.argv.slice(2);
const k = (name) => `${prefix}:${name}`;
const redis = new Redis({ path: sock, maxRetriesPerRequest: 1 });

assert.equal(await redis.set(k('plain'), '1'), 'OK');
assert.equal(await redis.get(k('plain')), '1');

const got = await redis.multi().set(k('a'), '1').set(k('b'), '2').get(k('a')).exec();
assert.deepEqual(got, [[null, 'OK'], [null, 'OK'], [null, '1']]);
assert.deepEqual(await redis.mget(k('a'), k('b')), ['1', '2']);

await redis.quit();
console.log('ok');
