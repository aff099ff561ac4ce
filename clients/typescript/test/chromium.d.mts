// The types of chromium.mjs.
export declare const CHROMIUM: string;
export declare const CHROMIUM_ARGS: string[];
export declare function sleep(ms: number): Promise<void>;
export declare function until(what: string, check: () => boolean | Promise<boolean>, ms: number, detail?: () => string): Promise<void>;
