// A real OpenID provider for tests/integration/oidc.rs: npm's certified `oidc-provider`
// (installed by scripts/test into ~/.cache/lazarus-test-node), with a client and users of its
// own. Anyone signs in on its development login form with any password; a user's groups are
// kept here and can be changed while it runs (`/test/groups`), as can what it does to the next
// ID token it hands out (`/test/mangle`: a forged payload, a validly signed but expired token,
// an unsigned one) — things a broken or hostile provider, or a man in the middle, would send.
// It signs out as RP-Initiated Logout 1.0 has it (its confirmation form, then back to
// POST_LOGOUT_URI with the state), unless told `no-end-session`: then its discovery document
// names no end_session_endpoint, as some providers' do not.
//
//   node oidc_provider.mjs PORT CLIENT_ID CLIENT_SECRET REDIRECT_URI POST_LOGOUT_URI [no-end-session]
//
// Prints `ready` once it listens on 127.0.0.1:PORT.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const [port, clientId, clientSecret, redirectUri, postLogoutUri, endSession] = process.argv.slice(2);
const modules = process.env.LAZARUS_TEST_NODE_MODULES
  || `${process.env.HOME}/.cache/lazarus-test-node/node_modules/`;
const require = createRequire(modules.endsWith('/') ? modules : `${modules}/`);
const { default: Provider } = await import(pathToFileURL(require.resolve('oidc-provider')));
const jose = await import(pathToFileURL(require.resolve('jose')));

const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
const jwk = { ...(await jose.exportJWK(privateKey)), kid: 'test-key', alg: 'RS256', use: 'sig' };

// Each user's groups; `userinfoOnly`: the groups claim is given at the userinfo endpoint
// only, never in the ID token (as some providers do).
const users = {
  ada: { groups: ['lazarus-admins'] },
  tom: { groups: ['tenant-a', 'staff'] },
  ursula: { groups: ['ops'], userinfoOnly: true },
  nora: { groups: ['unrelated'] },
};
let mangle = 'off';
let lastCallback = null;
// What the last request to the end_session_endpoint asked for (`/test/last-end-session`).
let lastEndSession = null;

const issuer = `http://127.0.0.1:${port}`;
const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: [redirectUri],
    post_logout_redirect_uris: [postLogoutUri],
    response_types: ['code'],
    grant_types: ['authorization_code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  jwks: { keys: [jwk] },
  cookies: { keys: ['a cookie key for tests only'] },
  claims: {
    openid: ['sub'],
    profile: ['preferred_username', 'name'],
    email: ['email'],
    groups: ['groups'],
  },
  // Scope claims in the ID token too (the userinfo endpoint has them as well).
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: { rpInitiatedLogout: { enabled: endSession !== 'no-end-session' } },
  ttl: { IdToken: 60, AccessToken: 60, AuthorizationCode: 60 },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims(use) {
        const user = users[id] || { groups: [] };
        const claims = { sub: id, preferred_username: id, name: id, email: `${id}@example.test` };
        if (!user.userinfoOnly || use === 'userinfo') claims.groups = user.groups;
        return claims;
      },
    };
  },
});

const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');

async function mangled(idToken, how) {
  const [header, payload, signature] = idToken.split('.');
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
  switch (how) {
    case 'signature': // a payload that asks for more, under the original signature
      return `${header}.${b64({ ...claims, groups: ['lazarus-admins'] })}.${signature}`;
    case 'expired': { // signed with the provider's own key, but expired ten minutes ago
      const now = Math.floor(Date.now() / 1000);
      return new jose.SignJWT({ ...claims, iat: now - 1200, exp: now - 600 })
        .setProtectedHeader({ alg: 'RS256', kid: 'test-key' })
        .sign(privateKey);
    }
    case 'unsigned':
      return `${b64({ alg: 'none', typ: 'JWT' })}.${payload}.`;
    default:
      return idToken;
  }
}

provider.use(async (ctx, next) => {
  if (ctx.path.startsWith('/test/')) {
    const q = ctx.query;
    if (ctx.path === '/test/groups') {
      users[q.user] = { ...(users[q.user] || {}), groups: q.groups ? q.groups.split(',') : [] };
      ctx.body = users[q.user];
    } else if (ctx.path === '/test/mangle') {
      mangle = q.how;
      ctx.body = { mangle };
    } else if (ctx.path === '/test/last-callback') {
      ctx.body = { url: lastCallback };
    } else if (ctx.path === '/test/last-end-session') {
      ctx.body = lastEndSession || {};
    } else {
      ctx.status = 404;
    }
    return;
  }
  if (ctx.path === '/session/end' && ctx.method === 'GET') {
    const q = { ...ctx.query };
    if (q.id_token_hint) {
      // Whose ID token the hint is; the provider itself checks that it signed it.
      const [, payload] = q.id_token_hint.split('.');
      q.id_token_hint = JSON.parse(Buffer.from(payload, 'base64url').toString());
    }
    lastEndSession = q;
  }
  await next();
  const location = ctx.response.get('location');
  if (location && location.startsWith(redirectUri)) lastCallback = location;
  if (ctx.path === '/token' && ctx.body && ctx.body.id_token && mangle !== 'off') {
    ctx.body = { ...ctx.body, id_token: await mangled(ctx.body.id_token, mangle) };
  }
});

const server = provider.listen(Number(port), '127.0.0.1', () => console.log('ready'));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
