export async function relayCommand(_args: string[]): Promise<number> {
  process.stderr.write("ifp relay: not available in this build\n");
  return 1;
}
