#!/usr/bin/python3
"""soak_creds.py - the soak's credential_process: each run issues a new set
of AWS session credentials that expire LIFE seconds later and registers it
in the verifying gateway's keys file (tests/s3/gateway.py), which refuses a
set with ExpiredToken once it has expired.

  soak_creds.py KEYS.json LIFE
prints the credential_process JSON (Version 1) on stdout."""

import fcntl
import json
import os
import sys
import time


def main():
    keys_path, life = sys.argv[1], float(sys.argv[2])
    with open(keys_path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(keys_path) as f:
                keys = json.load(f)
        except (OSError, ValueError):
            keys = {}
        now = time.time()
        # sets long expired are dropped: the gateway then says
        # InvalidAccessKeyId instead of ExpiredToken for them
        keys = {k: v for k, v in keys.items() if v["expires"] > now - 600}
        n = int(open(keys_path + ".n").read()) + 1 if os.path.exists(keys_path + ".n") else 1
        with open(keys_path + ".n", "w") as f:
            f.write(str(n))
        ak = "ASIASOAK%012d" % n
        k = {"secret": "soak/secret+%d" % n, "token": "soak/token/%d==" % n,
             "expires": now + life}
        keys[ak] = k
        with open(keys_path + ".tmp", "w") as f:
            json.dump(keys, f)
        os.rename(keys_path + ".tmp", keys_path)
    print(json.dumps({
        "Version": 1, "AccessKeyId": ak, "SecretAccessKey": k["secret"],
        "SessionToken": k["token"],
        "Expiration": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(k["expires"]))}))


if __name__ == "__main__":
    main()
