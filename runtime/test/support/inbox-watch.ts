// A watch of an agent's inbox through its local API (GET /messages/watch): its events as they
// come, until stopped.

/** The watch's status, the `data:` of each event so far (parsed), and how to end it and its reading. */
export async function watchInbox(
  localApiUrl: string,
  query = "",
): Promise<{ status: number; events: any[]; stop: () => Promise<void> }> {
  const ac = new AbortController();
  const res = await fetch(`${localApiUrl}/messages/watch${query}`, { signal: ac.signal });
  const events: any[] = [];
  const reading =
    res.status === 200
      ? (async () => {
          let buf = "";
          const text = new TextDecoder();
          for await (const chunk of res.body!) {
            buf += text.decode(chunk, { stream: true });
            for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
              const data = /^data: (.*)$/m.exec(buf.slice(0, i))?.[1];
              if (data) events.push(JSON.parse(data));
              buf = buf.slice(i + 2);
            }
          }
        })().catch(() => {})
      : res.body?.cancel();
  return {
    status: res.status,
    events,
    stop: async () => {
      ac.abort();
      await reading;
    },
  };
}
