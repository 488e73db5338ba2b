// The browser's session: refreshes the access token before it expires.

export const REFRESH_MARGIN_SECONDS = 60;

/** Asks auth-service for a new access token; on E4021 the user must log in again. */
export async function refreshSession(refreshToken: string): Promise<string> {
  const response = await fetch("/auth/refresh", { method: "POST", body: refreshToken });
  if (!response.ok) {
    throw new Error(await response.text());
  }
  return response.text();
}
