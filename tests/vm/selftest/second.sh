# The second scenario of a shared boot: it runs although the first failed, and its checks are
# named after it (second/...), so a name both scenarios use is two checks.
# checks: reports-ok also-never-reports
. /payload/lib.sh
ok reports-ok
