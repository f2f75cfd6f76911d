// The devnet's EVM chain as viem describes a chain: its id, its RPC, ETH for gas.
export function devnetChain(id, rpcUrl) {
  return {
    id,
    name: "devnet",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  };
}
