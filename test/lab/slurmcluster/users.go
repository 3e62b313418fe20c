package slurmcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ChrootUser returns uid and gid of user in root's /etc/passwd: the
// daemons' users (slurm, munge, mysql, slurmrest) and the lab's Slurm users.
func ChrootUser(root, user string) (uint32, uint32, error) {
	f, err := os.Open(filepath.Join(root, "etc/passwd"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Split(sc.Text(), ":")
		if len(p) >= 4 && p[0] == user {
			uid, err1 := strconv.ParseUint(p[2], 10, 32)
			gid, err2 := strconv.ParseUint(p[3], 10, 32)
			if err := errors.Join(err1, err2); err != nil {
				return 0, 0, fmt.Errorf("passwd entry of %s: %w", user, err)
			}
			return uint32(uid), uint32(gid), nil
		}
	}
	return 0, 0, fmt.Errorf("no user %s in the lab rootfs", user)
}
