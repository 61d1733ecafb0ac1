// Every request the operator makes to the API server — API calls and informers' watches alike —
// counted by method, host and answer, under client-go's name for it (rest_client_requests_total),
// so that the dashboards and alerts made for Kubernetes controllers read the operator too.
import { KubeConfig, type RequestContext } from "@kubernetes/client-node";
import { Agent, type Dispatcher } from "undici";

/** Called once per request: its method, the API server's host, and the status code or "<error>". */
export type RequestObserver = (method: string, host: string, code: string) => void;

/**
 * A KubeConfig whose clients report every request and share their connections. client-node
 * resolves the transport of each request (API clients and `Watch` alike) through
 * `applySecurityAuthentication`, so wrapping the dispatcher it sets there sees all of them,
 * including the ones that fail before an answer. client-node 2.0 sets a new dispatcher (a new
 * connection pool, so a new TLS handshake) for every request; the first one made for a TLS
 * identity is kept and used for all of them instead. A client certificate renewed in its file
 * takes effect with a restart.
 */
export class ObservedKubeConfig extends KubeConfig {
  private readonly observe: RequestObserver;
  /** One connection pool per TLS identity (client-node 2.0 makes a new one for every request). */
  private readonly pools = new Map<string, Dispatcher>();

  constructor(observe: RequestObserver) {
    super();
    this.observe = observe;
  }

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(context);
    const cluster = this.getCurrentCluster();
    const user = this.getCurrentUser();
    // What the TLS connection depends on; the credentials sent as headers (tokens) are per request.
    const key = JSON.stringify([
      cluster?.server,
      cluster?.caData,
      cluster?.caFile,
      cluster?.skipTLSVerify,
      cluster?.tlsServerName,
      cluster?.proxyUrl,
      user?.certData,
      user?.certFile,
      user?.keyData,
      user?.keyFile,
    ]);
    let pool = this.pools.get(key);
    if (!pool) {
      pool = (context.getDispatcher() ?? new Agent()).compose(observing(this.observe));
      this.pools.set(key, pool);
    }
    context.setDispatcher(pool);
  }
}

/** An undici interceptor that reports each request once, when its answer starts or it fails. */
function observing(observe: RequestObserver): Dispatcher.DispatcherComposeInterceptor {
  return (dispatch) => (opts, handler) => {
    const method = String(opts.method ?? "GET").toUpperCase();
    const host = hostOf(opts.origin);
    let reported = false;
    const report = (code: string) => {
      if (reported) return;
      reported = true;
      observe(method, host, code);
    };
    const wrapped = new Proxy(handler, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== "function") return value;
        if (prop === "onResponseStart")
          return (controller: unknown, statusCode: number, ...rest: unknown[]) => {
            if (statusCode >= 200) report(String(statusCode));
            return value.call(target, controller, statusCode, ...rest);
          };
        if (prop === "onHeaders")
          return (statusCode: number, ...rest: unknown[]) => {
            if (statusCode >= 200) report(String(statusCode));
            return value.call(target, statusCode, ...rest);
          };
        if (prop === "onResponseError" || prop === "onError")
          return (...args: unknown[]) => {
            report("<error>");
            return value.apply(target, args);
          };
        return value.bind(target);
      },
    });
    return dispatch(opts, wrapped);
  };
}

function hostOf(origin: string | URL | undefined): string {
  if (!origin) return "";
  try {
    return new URL(String(origin)).host;
  } catch {
    return "";
  }
}
