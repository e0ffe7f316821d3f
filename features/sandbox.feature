Feature: Sandboxes mounted through FUSE
  In order to let an agent change files freely without touching the host
  As an agent runtime
  I want to mount a copy-on-write sandbox over a base directory, work in it
  like in any directory, and find my changes there after it is mounted again

  Background:
    Given a base directory with these files:
      | path            | content      |
      | README.md       | hello        |
      | src/main.go     | package main |
      | src/lib/util.go | package lib  |
      | docs/guide.md   | the guide    |
    And a sandbox "work" over the base
    And the sandbox "work" is mounted

  Scenario: Create and edit files
    When I write "new file" to "notes.txt" in the mount
    And I append " world" to "README.md" in the mount
    And I create the directory "build/out" in the mount
    And I write "binary" to "build/out/app" in the mount
    And I unmount the sandbox "work"
    And I mount the sandbox "work"
    Then "notes.txt" in the mount contains "new file"
    And "README.md" in the mount contains "hello world"
    And "build/out/app" in the mount contains "binary"
    And the base is unchanged

  Scenario: Rename a base directory that has contents
    When I rename "src" to "source" in the mount
    Then "source/lib/util.go" in the mount contains "package lib"
    And "src" does not exist in the mount
    When I rename "source/main.go" to "cmd.go" in the mount
    And I remount the sandbox "work"
    Then "source/lib/util.go" in the mount contains "package lib"
    And "cmd.go" in the mount contains "package main"
    And "source/main.go" does not exist in the mount
    And "src" does not exist in the mount
    And the base is unchanged

  Scenario: What was written survives a crash of the server once the sandbox stood idle
    When I write "never fsync'ed" to "notes.txt" in the mount
    And I append " world" to "README.md" in the mount
    And I delete "docs/guide.md" in the mount
    And the sandbox stands idle for 1000 ms
    And the server is killed with SIGKILL
    And I mount the sandbox "work"
    Then "notes.txt" in the mount contains "never fsync'ed"
    And "README.md" in the mount contains "hello world"
    And "docs/guide.md" does not exist in the mount
    And the base is unchanged

  Scenario: Deletions persist
    When I delete "docs/guide.md" in the mount
    And I delete the directory "docs" in the mount
    And I delete "README.md" in the mount
    And I remount the sandbox "work"
    Then "docs" does not exist in the mount
    And "README.md" does not exist in the mount
    And "src/main.go" in the mount contains "package main"
    And the base is unchanged

  Scenario: Hard links share one inode, also after a remount
    When I hard-link "README.md" as "README.link" in the mount
    And I write "hello" to "new.txt" in the mount
    And I hard-link "new.txt" as "src/new.link" in the mount
    Then "README.md" and "README.link" in the mount are one inode with 2 links
    And "new.txt" and "src/new.link" in the mount are one inode with 2 links
    When I write "changed through the link" to "README.link" in the mount
    Then "README.md" in the mount contains "changed through the link"
    When I note the inode numbers of every file in the mount
    And I remount the sandbox "work"
    Then every file in the mount has the inode number I noted
    And "README.md" and "README.link" in the mount are one inode with 2 links
    And "src/new.link" in the mount contains "hello"
    And the base is unchanged

  Scenario: Access control lists are kept and handed down
    When I run setfacl -m u:1000:rw on "README.md" in the mount
    Then getfacl of "README.md" in the mount shows "user:1000:rw-"
    And "README.md" in the mount has the mode 664
    When I run setfacl -d -m u:1000:rwx,g::rx,o::- on "src" in the mount
    And I write "package main" to "src/new.go" in the mount
    And I create the directory "src/sub" in the mount
    Then getfacl of "src/new.go" in the mount shows "user:1000:rwx"
    And getfacl of "src/new.go" in the mount shows "mask::r--"
    And "src/new.go" in the mount has the mode 640
    And getfacl of "src/sub" in the mount shows "default:user:1000:rwx"
    When I remount the sandbox "work"
    Then getfacl of "README.md" in the mount shows "user:1000:rw-"
    And getfacl of "src/new.go" in the mount shows "user:1000:rwx"
    And getfacl of "src/sub" in the mount shows "default:user:1000:rwx"
    And the base is unchanged

  Scenario: Mounting an unknown sandbox fails clearly
    When I try to mount the sandbox "nope" at a second mountpoint
    Then the command fails with exit code 1
    And the error says "sandbox nope: not found"
    And the sandbox "work" is still mounted

  Scenario: A mounted sandbox cannot be mounted a second time
    When I try to mount the sandbox "work" at a second mountpoint
    Then the command fails with exit code 1
    And the error says "already mounted"
    And the hint says "strata unmount work"
    And the sandbox "work" is still mounted
    And the second mountpoint is not a mount point

  Scenario: mount(8) and umount(8) mount a sandbox as fuse.strata
    When I write "kept" to "notes.txt" in the mount
    And I unmount the mountpoint with umount
    Then the sandbox "work" is not mounted
    When I mount "strata:work" with mount.fuse3 and options "ro,noexec"
    Then the mountpoint shows type "fuse.strata", source "strata:work" and options "ro,nosuid,nodev,noexec,noatime"
    And "notes.txt" in the mount contains "kept"
    And the sandbox "work" is still mounted
    And the base is unchanged
